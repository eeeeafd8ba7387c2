"""`assistant bench --temperature`: speed against temperature and draft length, sampled, on one chain of GGUF
files (a model set, or a workload's pair).

For every sampling setting (temperature x top-p) and prompt, each seed's answer from every method in turn, the
order rotated from one (prompt, seed) to the next, whole requests timed from empty caches: ours in one worker
(the target alone; the target with each draft at the adaptive policy's lengths and at each fixed length; with
the n-gram level; the default chain), llama.cpp's `llama-speculative-simple` at the same temperature, top-p and
seed with each draft at each length and with its n-gram lookup (stock kernels, its own timings). A method's
ratio on a prompt is the target alone's seconds per new token over its own, over the prompt's seeds (ours write
the target's very tokens, so this is its whole requests' time; llama.cpp samples with its own generator, so its
answers differ in length). A seed's answer is
the target's own sample for that seed (probabilities.py), so every answer of ours must equal the target alone's:
the report counts those that do not. Temperature 0 is greedy, one run a prompt.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from assistant.bench import llamacpp
from assistant.errors import AssistantError
from converters.progress import Steps
from assistant.bench.runner import WARMUP_TOKENS, WorkerProcess

TARGET, DEFAULT = "target", "default-chain"
LLAMA_PREFIX = "llama-spec-"


def methods(levels: list[tuple[str, Path]], lengths: tuple[int, ...], llama_cpp: bool = True) -> list[dict]:
    """Every method compared on ``levels`` (role, GGUF path; target first): ``spec`` for ours (the worker's
    pipeline), ``draft`` and ``length`` for llama.cpp's program (no draft: its n-gram lookup)."""
    paths = [str(path) for _, path in levels]
    roles = [role for role, _ in levels]

    def ours(key, label, chosen, draft_length="adaptive", ngram=False):
        return {"key": key, "label": label, "spec": {
            "paths": [paths[i] for i in chosen], "roles": [roles[i] for i in chosen], "draft_length": draft_length,
            "confidence": None if draft_length == "adaptive" else 0.0, "ngram": ngram}}

    found = [ours(TARGET, "ours: target alone", (0,))]
    for index, role in enumerate(roles[1:], start=1):
        found.append(ours(f"target+{role}", f"ours: target <- {role}, adaptive lengths", (0, index)))
        found += [ours(f"target+{role}-k{k}", f"ours: target <- {role}, k={k}", (0, index), k) for k in lengths]
    found.append(ours("target+ngram", "ours: target <- n-gram level, adaptive", (0,), ngram=True))
    if len(roles) > 1:
        found.append(ours(DEFAULT, "ours: default chain " + " <- ".join([*roles, "n-gram"]), range(len(roles)),
                          ngram=True))
    if llama_cpp:
        for role, path in levels[1:]:
            found += [{"key": f"{LLAMA_PREFIX}{role}-k{k}", "label": f"llama-speculative-simple, {role} draft, "
                       f"n-max {k}, stock kernels", "draft": path, "length": k} for k in lengths]
        found.append({"key": f"{LLAMA_PREFIX}ngram", "label": f"llama-speculative-simple, {llamacpp.NGRAM}, stock "
                      "kernels", "draft": None, "length": 0})
    return found


def parse_numbers(option: str, text: str, low: float, high: float) -> list[float]:
    """``text``'s comma-separated numbers, each from ``low`` to ``high``, or a one-line error naming ``option``."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or not all(low <= value <= high for value in values):
        raise AssistantError(f"{option}: give comma-separated numbers from {low} to {high}, not {text!r}")
    return values


def settings_grid(temperatures: list[float], top_ps: list[float]) -> list[dict]:
    """Every (temperature, top-p); greedy once, whatever top-p."""
    grid = []
    for temperature in temperatures:
        for top_p in ([1.0] if temperature <= 0 else top_ps):
            grid.append({"temperature": temperature, "top_p": top_p})
    return grid


def run(levels: list[tuple[str, Path]], prompts: list[dict], grid: list[dict], seeds: list[int], max_tokens: int,
        threads: int, lengths: tuple[int, ...], bin_dir: Path | None, log_dir: Path, n_ctx: int = 4096,
        show_progress: bool | None = None, repeats: int = 1) -> dict:
    """``repeats``: passes over every method per (prompt, seed), each in a new rotation; a method's time there is
    the median of its passes (on a VM whose speed drifts by 2x over minutes, one pass gives a prompt's ratio
    +-15%)."""
    chosen = methods(levels, lengths, llama_cpp=bin_dir is not None)
    ours = [method for method in chosen if "spec" in method]
    runs_per = sum(len(seeds) if setting["temperature"] > 0 else 1 for setting in grid) * len(prompts) * repeats
    progress = Steps("bench --temperature", len(ours) + runs_per * len(chosen), show_progress)
    log_dir.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    worker = WorkerProcess("ours", {}, log_dir / "worker-sampled.log")
    rows = []
    try:
        worker.call("load", n_ctx=n_ctx, threads=threads, pipelines={m["key"]: m["spec"] for m in ours})
        texts = [worker.call("prompt_text", pipeline=TARGET, messages=prompt["messages"])["text"] for prompt in prompts]
        for method in ours:  # first touch of weights, thread pools and buffers
            progress.step(f"warm-up {method['key']}")
            worker.call("run", pipeline=method["key"], messages=prompts[0]["messages"], max_tokens=WARMUP_TOKENS)
        turn = 0
        for setting in grid:
            for index, prompt in enumerate(prompts):
                for seed, repeat in [(seed, repeat) for seed in (seeds if setting["temperature"] > 0 else [None])
                                     for repeat in range(repeats)]:
                    sampling = dict(setting, seed=seed)
                    shift = turn % len(chosen)
                    turn += 1
                    for method in chosen[shift:] + chosen[:shift]:
                        progress.step(f"T={setting['temperature']} {prompt.get('id', index)} {method['key']}")
                        row = {"method": method["key"], "prompt": prompt.get("id", str(index)), **sampling,
                               "repeat": repeat}
                        if "spec" in method:
                            reply = worker.call("run", pipeline=method["key"], messages=prompt["messages"],
                                                max_tokens=max_tokens, sampling=sampling)
                            row |= {"seconds": reply["seconds"], "new_tokens": reply["new_tokens"],
                                    "tokens": reply["tokens"], "levels": reply["levels"], "shapes": reply["shapes"]}
                        else:
                            result = _llama_cpp(bin_dir, levels[0][1], method, texts[index], max_tokens, threads,
                                                n_ctx, sampling)
                            row |= {"seconds": result.seconds, "new_tokens": result.new_tokens,
                                    "acceptance": result.accepted / result.drafted if result.drafted else 0.0,
                                    "command": result.command}
                        rows.append(row)
                if not progress.enabled:  # a log file gets one line a prompt
                    print(f"[bench] T={setting['temperature']} top-p={setting['top_p']}: prompt {index + 1}/"
                          f"{len(prompts)} done after {(time.perf_counter() - began) / 60:.1f} min", file=sys.stderr,
                          flush=True)
    finally:
        worker.close()
        progress.finish()
    _check_identity(rows)
    return {"levels": [{"role": role, "path": str(path)} for role, path in levels],
            "methods": [{key: value for key, value in method.items() if key != "spec"} for method in chosen],
            "grid": grid, "seeds": seeds, "repeats": repeats, "prompts": [prompt.get("id", str(i)) for i, prompt in enumerate(prompts)],
            "max_tokens": max_tokens, "threads": threads, "rows": rows, "seconds": time.perf_counter() - began}


def _llama_cpp(bin_dir: Path, target: Path, method: dict, prompt: str, max_tokens: int, threads: int, n_ctx: int,
               sampling: dict):
    """llama-speculative-simple on one prompt at one setting, with its stock kernels."""
    spec_type = llamacpp.DRAFT if method["draft"] else llamacpp.NGRAM
    return llamacpp.run(bin_dir, target, method["draft"], prompt, max_tokens, method["length"], threads, n_ctx,
                        dict(llamacpp.STOCK_KERNELS), spec_type=spec_type, sampling=sampling)


def _check_identity(rows: list[dict]) -> None:
    """Mark each answer of ours identical or not to the target alone's for the same prompt, setting and seed."""
    key = lambda row: (row["prompt"], row["temperature"], row["top_p"], row["seed"])  # noqa: E731
    reference = {key(row): row["tokens"] for row in rows if row["method"] == TARGET}
    for row in rows:
        if "tokens" in row:
            row["identical"] = row.pop("tokens") == reference[key(row)]


def summarize(record: dict) -> list[dict]:
    """Per setting: each method's median and lowest ratio over prompts (the target alone's seconds per new token
    over its own, seeds summed: ours write the target's tokens, llama.cpp's program samples others, of other
    lengths; a seed's time the median of its repeats), its acceptance (ours: per level below the target), and
    answers differing from the target's."""
    summary = []
    for setting in record["grid"]:
        rows = [row for row in record["rows"]
                if row["temperature"] == setting["temperature"] and row["top_p"] == setting["top_p"]]
        passes: dict[tuple, list[dict]] = {}  # (method, prompt, seed) -> its rows, one a repeat
        for row in rows:
            passes.setdefault((row["method"], row["prompt"], row["seed"]), []).append(row)
        spent: dict[str, dict[str, list[float]]] = {}  # method -> prompt -> [seconds, new tokens]
        for (method, prompt, _), repeated in passes.items():
            totals = spent.setdefault(method, {}).setdefault(prompt, [0.0, 0])
            totals[0] += statistics.median(row["seconds"] for row in repeated)
            totals[1] += statistics.median(row["new_tokens"] for row in repeated)
        base = spent[TARGET]
        methods_summary = {}
        for method, per_prompt in spent.items():
            ratios = [(base[prompt][0] / max(base[prompt][1], 1)) / (seconds / max(tokens, 1))
                      for prompt, (seconds, tokens) in per_prompt.items() if seconds > 0]
            mine = [row for row in rows if row["method"] == method]
            methods_summary[method] = {
                "median": statistics.median(ratios), "lowest": min(ratios),
                "tokens_per_second": sum(t for _, t in per_prompt.values()) / sum(s for s, _ in per_prompt.values()),
                "acceptance": _acceptance(mine),
                "differing": sum(1 for row in mine if row.get("identical") is False)}
        summary.append({**setting, "methods": methods_summary})
    return summary


def _acceptance(rows: list[dict]) -> dict[str, float]:
    """Accepted over proposed per level below the target (ours) or for the draft (llama.cpp's)."""
    if rows and "levels" not in rows[0]:
        return {"draft": statistics.fmean(row["acceptance"] for row in rows)}
    proposed: dict[str, list[int]] = {}
    for row in rows:
        for level in row["levels"][1:]:
            counts = proposed.setdefault(level["role"], [0, 0])
            counts[0] += level["proposed"]
            counts[1] += level["accepted"]
    return {role: accepted / offered for role, (offered, accepted) in proposed.items() if offered}


def markdown(result: dict) -> str:
    record, summary = result["record"], result["summary"]
    machine = result["machine"]
    lines = [
        "# Sampled speed: speedup over the target alone by temperature and draft length", "",
        f"Machine: {machine['cpu']} ({machine['cpu_class']}), {machine['cpus']} CPUs; kernels: {machine['kernels']}.",
        f"{len(record['prompts'])} prompts x {len(record['seeds'])} seeds"
        + (f" x {record['repeats']} passes (a seed's time: their median)" if record.get("repeats", 1) > 1 else "")
        + f", {record['max_tokens']} new tokens, "
        f"{record['threads']} threads; whole requests, alternated; a cell is the median over prompts of the target "
        "alone's seconds per new token over the method's (lowest prompt in brackets).", "",
        "| method | " + " | ".join(f"T={s['temperature']} top-p={s['top_p']}" for s in summary) + " |",
        "| --- |" + " --- |" * len(summary),
    ]
    for method in record["methods"]:
        cells = []
        for setting in summary:
            m = setting["methods"].get(method["key"])
            cells.append("-" if m is None else f"{m['median']:.2f}x ({m['lowest']:.2f})")
        lines.append(f"| {method['label']} | " + " | ".join(cells) + " |")
    lines += ["", "| setting | default chain | best other method of ours | best of llama.cpp | acceptance (default chain) | "
              "answers differing |", "| --- | --- | --- | --- | --- | --- |"]
    for setting in summary:
        ms = setting["methods"]
        ours = {k: v for k, v in ms.items() if not k.startswith(LLAMA_PREFIX) and k not in (TARGET, DEFAULT)}
        llama = {k: v for k, v in ms.items() if k.startswith(LLAMA_PREFIX)}
        best_ours = max(ours, key=lambda k: ms[k]["median"], default=None)
        best_llama = max(llama, key=lambda k: ms[k]["median"], default=None)
        chain = ms.get(DEFAULT) or ms[TARGET]
        acceptance = ", ".join(f"{role} {value:.2f}" for role, value in chain["acceptance"].items())
        differing = sum(m["differing"] for m in ms.values())
        lines.append(f"| T={setting['temperature']} top-p={setting['top_p']} | {chain['median']:.2f}x "
                     f"({chain['lowest']:.2f}) | {_named(best_ours, ms)} | {_named(best_llama, ms)} | {acceptance} | "
                     f"{differing} |")
    return "\n".join(lines) + "\n"


def _named(key: str | None, methods_summary: dict) -> str:
    return "-" if key is None else f"{key} {methods_summary[key]['median']:.2f}x"
