"""The figures and the Markdown report of `bench --set`: every method's speed, its ratios to the target alone
and to llama.cpp's baselines taken prompt by prompt in the same run, the issue's goals, and every baseline's
program and command line.

A ratio on a prompt is tokens/s over tokens/s (new tokens over the whole request, prompt included); "after
the prompt" divides the new tokens by the time after the prompt was evaluated. Geomeans over the prompts.
"""

from __future__ import annotations

import re
import statistics

from assistant.bench import llamabench, llamacpp
from assistant.bench.set_methods import DEFAULT, PLAIN_OURS, PLAIN_STOCK, SPECULATIVE_PREFIX, TARGET
from assistant.bench.summary import geomean

GOAL_TARGET_OVER_PLAIN, GOAL_OVER_PLAIN, GOAL_OVER_SPECULATIVE = 0.95, 1.25, 1.1


def summarize(record: dict) -> dict:
    runs = record["runs"]
    best = best_speculative(record)
    references = {"target": TARGET, "plain_stock": PLAIN_STOCK, "plain_ours": PLAIN_OURS, "best_speculative": best}
    rows = {}
    for key, records in runs.items():
        after = [r["after_prompt_tokens_per_second"] for r in records if r["after_prompt_tokens_per_second"]]
        row = {
            "tokens_per_second_median": statistics.median(r["tokens_per_second"] for r in records),
            "after_prompt_median": statistics.median(after) if after else None,
            "new_tokens": sum(r["new_tokens"] for r in records),
            "differing": sum(r["identical"] is False for r in records),
            "compared": sum(r["identical"] is not None for r in records),
        }
        for name, reference in references.items():
            row[f"over_{name}"] = _ratio(records, runs.get(reference), "tokens_per_second") if reference else None
            row[f"after_prompt_over_{name}"] = (_ratio(records, runs.get(reference), "after_prompt_tokens_per_second")
                                                if reference else None)
        rows[key] = row
    return {"best_speculative": best, "rows": rows}


def best_speculative(record: dict) -> str | None:
    """Of llama.cpp's speculative runs (with each draft model, and its n-gram lookup), the fastest over the run
    (geomean tokens/s): what a llama.cpp user would pick."""
    keys = [key for key in record["runs"] if key.startswith(SPECULATIVE_PREFIX)]
    return max(keys, key=lambda key: geomean([r["tokens_per_second"] for r in record["runs"][key]]), default=None)


def _ratio(records: list[dict], reference: list[dict] | None, field: str) -> float | None:
    if not reference:
        return None
    ratios = [r[field] / b[field] for r, b in zip(records, reference) if r[field] and b[field]]
    return geomean(ratios) if ratios else None


def _x(value) -> str:
    return f"{value:.2f}x" if value else "—"


def _rate(value) -> str:
    return f"{value:.1f}" if value else "—"


def markdown(report: dict) -> str:
    settings, info, record = report["settings"], report["machine"], report["set"]
    summary, model_set = record["summary"], record["model_set"]
    labels = {method["key"]: method["label"] for method in record["methods"]}
    levels = ", ".join(f"{level['role']} `{level['path']}` ({level['bytes'] / 1e6:.1f} MB)"
                       for level in model_set["levels"])
    shaped = ("the target's chat template" if record.get("templated", True)
              else "as plain text: the target stores no chat template")
    lines = [
        f"# `assistant bench --set {model_set['name']}`",
        "",
        f"CPU: {info.get('cpu', '?')} [{info.get('cpu_class', '?')}], {info.get('cpus', '?')} logical CPUs; "
        f"{info.get('platform', '')}; commit {info.get('commit', '?')}; {info['date']}. Our kernels: "
        f"{info.get('kernels', '?')}; llama.cpp's CPU variant: {info.get('cpu_variant', '?')}.",
        "",
        f"Model set {model_set['name']!r}: {levels}.",
        "",
        f"Settings: greedy, {settings['max_tokens']} new tokens, {settings['threads']} threads, "
        f"{len(record['prompts'])} chat prompts from `{settings['prompts_file']}` "
        f"({shaped}), "
        f"context {settings['n_ctx']}. Ours and llama.cpp's programs alternate on every prompt (order rotating); "
        "ratios are taken prompt by prompt within this run, geomean over prompts. Our times are wall-clock around "
        "each request; llama.cpp's are the times its programs print (model loading excluded). Total run time: "
        f"{record['seconds'] / 60:.1f} min.",
        "",
        "| method | tokens/s (median) | after the prompt (median) | x target alone | x llama.cpp plain, stock "
        "| x llama.cpp plain, our kernels | x llama.cpp best speculative | answers differing from the target alone |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for method in record["methods"]:
        key, row = method["key"], summary["rows"][method["key"]]
        label = labels[key] + (f" (n={method['draft_length']})" if method.get("draft_length") else "")
        differing = f"{row['differing']} of {row['compared']}" if row["compared"] else "— (no answer)"
        lines.append(f"| {label} | {_rate(row['tokens_per_second_median'])} | {_rate(row['after_prompt_median'])} "
                     f"| {_x(row['over_target'])} | {_x(row['over_plain_stock'])} | {_x(row['over_plain_ours'])} "
                     f"| {_x(row['over_best_speculative'])} | {differing} |")
    lines += ["", *_goals(summary), ""]
    if record["llama_cpp_sweep"]:
        lines += ["llama-speculative-simple's draft lengths (first prompts, stock kernels; the best per draft runs "
                  "above):", "", "| draft | --spec-draft-n-max | tokens/s | acceptance |", "| --- | --- | --- | --- |"]
        lines += [f"| {row['draft']} | {row['draft_length']} | {row['tokens_per_second']:.1f} "
                  f"| {100 * row['acceptance']:.1f}% |" for row in record["llama_cpp_sweep"]]
        lines.append("")
    lines += _commands(record)
    return "\n".join(lines) + "\n"


def _goals(summary: dict) -> list[str]:
    """Issue 40's bars, on what this run measured."""
    rows, lines = summary["rows"], ["Goals (issue 40):", ""]
    target = rows[TARGET].get("after_prompt_over_plain_ours")
    if target:
        lines.append(f"- target alone after the prompt: {target:.2f}x llama-bench's decoding with our kernels "
                     f"(goal {GOAL_TARGET_OVER_PLAIN:.2f}x): {_met(target >= GOAL_TARGET_OVER_PLAIN)}")
    chain = DEFAULT if DEFAULT in rows else TARGET
    over_plain, over_best = rows[chain]["over_plain_stock"], rows[chain]["over_best_speculative"]
    if over_plain:
        lines.append(f"- {chain}: {over_plain:.2f}x llama.cpp's plain decoding with stock kernels "
                     f"(goal {GOAL_OVER_PLAIN:.2f}x): {_met(over_plain >= GOAL_OVER_PLAIN)}")
    if over_best:
        lines.append(f"- {chain}: {over_best:.2f}x llama.cpp's best speculative setting ({summary['best_speculative']}; "
                     f"goal {GOAL_OVER_SPECULATIVE:.2f}x): {_met(over_best >= GOAL_OVER_SPECULATIVE)}")
    ours_differing = sum(row["differing"] for key, row in rows.items() if not key.startswith("llama-"))
    lines.append(f"- answers of ours differing from the target alone: {ours_differing} (goal 0)")
    return lines


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def _commands(record: dict) -> list[str]:
    """Every baseline's program and full command line, as run on the first prompt (later prompts change only
    the prompt: -p's text for llama-speculative-simple, -p and -pg's lengths for llama-bench)."""
    lines = ["Baselines' command lines (first prompt):", ""]
    for method in record["methods"]:
        if method["ours"]:
            continue
        first = record["runs"][method["key"]][0]
        fence = "`" * (max(map(len, re.findall("`+", first["command"])), default=0) + 3)  # outlasts the prompt's
        lines += [f"- {method['label']}: `{method['program']}`", "", fence, first["command"], fence, ""]
    sweep = record["llama_cpp_sweep"]
    if sweep:
        lines += [f"- the sweep's runs differ from these only in --spec-draft-n-max "
                  f"({', '.join(str(n) for n in sorted({row['draft_length'] for row in sweep}))})", ""]
    programs = ", ".join(sorted({llamabench.PROGRAM, llamacpp.PROGRAM}))
    lines += [f"Programs ({programs}) are those of this install's native llama.cpp build.", ""]
    return lines
