"""bench.json (everything, machine-readable) and bench.md (our figures beside the paper's Tables I-III)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

from assistant import cpu
from assistant.bench.oracle import policy_share
from assistant.bench.pipelines import ADAPTIVE_GOAL, ADAPTIVE_RIVALS, BASELINE, LABELS, LLAMA_CPP, PAPER, PLAIN

GOAL_SPEEDUP, GOAL_OVER_LLAMA_CPP = 3.0, 1.3
SINGLE_LEVEL = ("sd-draft", "sd-mxfp4", "sd-draft-mxfp4", "sd-ngram")
MULTI_LEVEL = ("mlsd", "mlsd-adaptive", "mlsd-adaptive-mxfp4")


def machine() -> dict:
    this = cpu.this_cpu()
    info = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "cpu": this.model, "cpu_class": this.kind}
    try:
        from assistant.engine import backend

        info["kernels"] = backend.kernel_description()
        info["cpu_variant"] = backend.llama_cpu_variant()
    except (ImportError, LookupError):
        info["kernels"] = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in lscpu.splitlines():
            if line.strip().startswith(("L3 cache", "Flags")) and "Flags" not in line:
                info["l3"] = line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        root = Path(__file__).resolve().parents[2]
        info["commit"] = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    info["date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return info


def write_json(report: dict, path: Path) -> None:
    """The full report; per-run token lists are dropped (the identity flags carry their verdict)."""
    slim = json.loads(json.dumps(report, default=str))
    for workload in slim.get("workloads", {}).values():
        for key, records in workload["runs"].items():
            for record in records:
                record.pop("tokens", None)
                if key != BASELINE:
                    record.pop("text", None)
    path.write_text(json.dumps(slim, indent=1) + "\n")


def _gbps(value) -> str:
    return f"{value:.1f} GB/s" if value else "not measured"


def _x(value) -> str:
    return f"{value:.2f}x" if value else "—"


def _interval(bounds) -> str:
    return f"{bounds[0]:.2f}-{bounds[1]:.2f}x" if bounds else "—"


def _pct(value) -> str:
    return f"{100 * value:.1f}%" if value is not None else "—"


def markdown(report: dict) -> str:
    settings, info = report["settings"], report["machine"]
    lines = [
        "# `assistant bench`",
        "",
        f"Machine: {info.get('cpu', '?')} [{info.get('cpu_class', '?')}], {info.get('cpus', '?')} logical CPUs, "
        f"L3 {info.get('l3', '?')}, {info.get('memory_gib', '?')} GiB; {info.get('platform', '')}; commit "
        f"{info.get('commit', '?')}; {info['date']}. Our kernels: {info.get('kernels', '?')}, llama.cpp's CPU variant: "
        f"{info.get('cpu_variant', '?')}. Measured read "
        f"bandwidth: {_gbps(info.get('read_bandwidth_gbps'))}.",
        "",
        f"Settings: greedy, {settings['max_tokens']} new tokens, {settings['threads']} threads, "
        f"prompts from `{settings['prompts_file']}` (count per workload below), context {settings['n_ctx']}; pipelines "
        "interleaved prompt by prompt (rotating order), each warmed up once, every run from empty caches. Speedup = "
        "tokens/s over (i)'s on the same prompt; geomean over prompts. Our times are wall-clock around the whole "
        "generation (prompt included); llama.cpp's are the encode + decode times `llama-speculative-simple` "
        "prints itself (its model loading excluded).",
        f"Total run time: {report['seconds'] / 60:.1f} min.",
        "",
    ]
    for key, workload in report["workloads"].items():
        lines += _workload_section(workload, info.get("read_bandwidth_gbps"))
    if report.get("kernel"):
        lines += ["## Kernel sweep (paper Figure 7)", "", report["kernel"].get("markdown", "").strip(), "",
                  "![kernel sweep](kernels.png)", ""]
    return "\n".join(lines) + "\n"


def _workload_section(workload: dict, bandwidth_gbps: float | None = None) -> list[str]:
    info, summary = workload["workload"], workload["summary"]
    params = info["parameters"]
    sizes = info["file_bytes"]
    # Speed of light: plain decoding reads every weight of the BF16 target once per token.
    light = bandwidth_gbps * 1e9 / sizes["target"] if bandwidth_gbps else None
    lines = [
        f"## Workload {info['title']}",
        "",
        f"Target {params['target'] / 1e6:.1f}M parameters ({sizes['target'] / 1e9:.2f} GB BF16 GGUF, MXFP4 copy "
        f"{sizes['mxfp4'] / 1e9:.2f} GB); small draft {params['draft'] / 1e6:.1f}M parameters "
        f"({sizes['draft'] / 1e9:.3f} GB BF16, {sizes['draft-mxfp4'] / 1e9:.3f} GB MXFP4), "
        f"{params['target'] / params['draft']:.1f}x smaller. "
        f"{len(workload['prompts'])} prompts.",
    ]
    if info.get("padding"):
        lines.append(f"Padding (zero-output capacity, outputs unchanged): target {info['padding']['target']}, "
                     f"draft {info['padding']['draft']}.")
    if light:
        lines.append(f"Speed of light (read bandwidth / BF16 target bytes, the rate of plain decoding that reads the "
                     f"weights at full bandwidth): {light:.1f} tokens/s; the x SoL column divides tokens/s by it.")
    lines += [
        "",
        "| pipeline | speedup over (i) (geomean) | 95% interval | min | median | max "
        "| after the prompt (geomean) | prompt's share of time "
        "| over (o) stock kernels in our loop (geomean) | tokens/s (median) | x SoL | prompts differing from (i) "
        "| paper, QA Llama2-7B (Table I) | paper, code Qwen2.5-Coder-7B (Table II/III) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, row in summary.items():
        paper = PAPER.get(key, {})
        label = LABELS.get(key, key)
        if key == LLAMA_CPP and workload.get("llama_cpp_best"):
            best = workload["llama_cpp_best"]
            label += f" ({best['draft']} draft, n={best['draft_length']})"
        lines.append(
            f"| {label} | {_x(row['speedup_geomean'])} | {_interval(row.get('speedup_interval'))} "
            f"| {_x(row['speedup_min'])} | {_x(row['speedup_median'])} "
            f"| {_x(row['speedup_max'])} | {_x(row.get('speedup_after_prompt_geomean'))} "
            f"| {_pct(row.get('prompt_share'))} | {_x(row.get('speedup_over_plain_geomean'))} "
            f"| {row['tokens_per_second_median']:.1f} "
            f"| {_x(row['tokens_per_second_median'] / light if light else None)} | {row['differing_prompts']} of "
            f"{row['prompts']} | {_x(paper.get('qa'))} | {_x(paper.get('code'))} |")
    lines += ["", "Per level (level 0 is the target; a draft's alpha and tau are measured by the level above it; share "
              "of time = llama_decode time in that level's context over the pipeline's wall time, the rest is "
              "sampling and coordination):", "",
              "| pipeline | level | alpha (acceptance) | paper alpha (QA / code) | tau (mean accepted length) | share of time |",
              "| --- | --- | --- | --- | --- | --- |"]
    for key, row in summary.items():
        if key in (BASELINE, PLAIN):
            continue
        for index, level in enumerate(row["levels"]):
            paper = ""
            if level["role"] in ("draft", "draft-mxfp4", "mxfp4"):
                source = PAPER["sd-draft" if level["role"].startswith("draft") else "sd-mxfp4"]
                paper = f"{_pct(source['acceptance_qa'])} / {_pct(source['acceptance_code'])}"
            tau = f"{level['mean_accepted_length']:.2f}" if level["mean_accepted_length"] else "—"
            lines.append(f"| {LABELS.get(key, key)} | {index}: {level['role']} | {_pct(level['acceptance'])} | {paper} "
                         f"| {tau} | {_pct(level['time_share'])} |")
    if workload.get("llama_cpp_sweep"):
        lines += ["", "llama.cpp sweep (first prompts; the best row runs interleaved above):", "",
                  "| draft | n | tokens/s | acceptance |", "| --- | --- | --- | --- |"]
        for row in workload["llama_cpp_sweep"]:
            lines.append(f"| {row['draft']} | {row['draft_length']} | {row['tokens_per_second']:.1f} | "
                         f"{_pct(row['acceptance'])} |")
    lines += [""] + _policy(summary) + _goals(summary) + _ceiling(workload.get("ceiling"), workload.get("cost_samples"))
    lines += _oracle(workload.get("oracle")) + [""]
    lines += [f"![per-prompt speedups](speedups-{info['key']}.png)",
              f"![acceptance histograms](acceptance-{info['key']}.png)", ""]
    return lines


def _policy(summary: dict) -> list[str]:
    """What each adaptive pipeline chose, against the best fixed pipeline it could have been."""
    lines = []
    for key, rivals in ADAPTIVE_RIVALS.items():
        present = [rival for rival in rivals if rival in summary]
        if key not in summary or not present:
            continue
        row = summary[key]
        best = max(present, key=lambda rival: summary[rival]["speedup_geomean"])
        ratio = row["speedup_geomean"] / summary[best]["speedup_geomean"] if summary[best]["speedup_geomean"] else 0
        shapes = row.get("shapes", {})
        used = ", ".join(f"{shape} {rounds}" for shape, rounds in shapes.get("rounds", {}).items())
        lines.append(f"- {LABELS[key]}: {row['speedup_geomean']:.2f}x, {ratio:.2f}x the best fixed pipeline "
                     f"{LABELS[best]} ({summary[best]['speedup_geomean']:.2f}x; goal {ADAPTIVE_GOAL:.2f}x: "
                     f"{'met' if ratio >= ADAPTIVE_GOAL else 'not met'}). Target rounds per chain shape: {used or '—'}; "
                     f"{shapes.get('outside_main', 0)} rounds outside each prompt's most used shape.")
    return ["Adaptive policy:", "", *lines, ""] if lines else []


def _ceiling(bound: dict | None, samples: int | None = None) -> list[str]:
    """What no speculative pipeline can beat here (ceiling.py), beside the goals it bounds; ``samples``: how many
    times the batch costs it rests on were measured over the run."""
    if not bound:
        return []
    plural = "s" if samples != 1 else ""
    sampled = f"; batch costs are medians of {samples} sample{plural}, one after each prompt's runs" if samples else ""
    return [f"- ceiling on these kernels, with every drafted token accepted and drafting free: "
            f"{_bound_ratios(bound)} ({bound['tokens_per_second_median']:.1f} tokens/s median; the target's cheapest "
            f"verification is {bound['verify_seconds_per_token'] * 1e3:.1f} ms a token, in batches of "
            f"{bound['verify_batch']}, and every prompt takes the time it took the target alone{sampled})"]


def _oracle(bound: dict | None) -> list[str]:
    """What no policy over the chain's levels can beat, their drafts being what they are (oracle.py)."""
    if not bound:
        return []
    policy = bound.get("policy_decode_seconds")
    against = f" against the policy's {policy:.1f} s" if policy is not None else ""
    lines = [f"- oracle for {LABELS.get(bound['pipeline'], bound['pipeline'])}, knowing in advance where each of "
             f"{', '.join(bound['roles'][1:])} proposes the target's tokens (no policy can): {_bound_ratios(bound)} "
             f"({bound['tokens_per_second_median']:.1f} tokens/s median; the answers decode in "
             f"{bound['decode_seconds']:.1f} s{against})"]
    shapes = bound.get("shape_decode_seconds") or {}
    share = policy_share(bound, bound["decode_seconds"])
    if share is not None:
        models = "<-".join(role for role in bound["roles"] if role != "ngram")
        alone = policy_share(bound, shapes[models]) if models in shapes else None
        without = (f"; {alone:.2f} of the bound over its model levels alone, {models}, foresight without the n-gram "
                   f"level") if alone is not None else ""
        lines.append(f"  - the policy runs at {share:.2f} of the oracle's speed over the whole run, prompts included"
                     f"{without}")
    if shapes:
        best = sorted(shapes.items(), key=lambda item: item[1])
        lines.append("  - the same foresight within one shape, the answers' decoding: "
                     + ", ".join(f"{shape} {seconds:.1f} s" for shape, seconds in best))
    return lines


def _bound_ratios(bound: dict) -> str:
    """A bound's speed against (i), llama.cpp's best and the speed of light, as far as it was measured."""
    parts = [f"{bound['speedup_geomean']:.2f}x over the target alone"]
    if bound.get("over_llama_cpp_geomean"):
        parts.append(f"{bound['over_llama_cpp_geomean']:.2f}x over llama.cpp's best")
    if bound.get("speed_of_light"):
        parts.append(f"{bound['speed_of_light']:.2f}x the speed of light")
    return ", ".join(parts)


def _goals(summary: dict) -> list[str]:
    """The issue's goals, checked on whatever this run measured."""
    multi = [key for key in MULTI_LEVEL if key in summary]
    if not multi:
        return []
    best = max(multi, key=lambda key: summary[key]["speedup_geomean"])
    value = summary[best]["speedup_geomean"]
    lines = [f"Goals (best multi-level pipeline: {LABELS[best]}):", "",
             f"- {value:.2f}x over the target alone (95% interval over prompts "
             f"{_interval(summary[best].get('speedup_interval'))}; goal {GOAL_SPEEDUP:.1f}x, paper 2.72x): "
             f"{'met' if value >= GOAL_SPEEDUP else 'not met'}"]
    after, share = summary[best].get("speedup_after_prompt_geomean"), summary.get(BASELINE, {}).get("prompt_share")
    if after and share:
        lines.append(f"  - after the prompt {after:.2f}x: the prompt, which every pipeline has the target evaluate "
                     f"before it drafts, is {share:.0%} of the target alone's time")
    if LLAMA_CPP in summary and summary[LLAMA_CPP]["speedup_geomean"]:
        ratio = value / summary[LLAMA_CPP]["speedup_geomean"]
        lines.append(f"- {ratio:.2f}x over llama.cpp's best speculative setting (goal {GOAL_OVER_LLAMA_CPP:.1f}x): "
                     f"{'met' if ratio >= GOAL_OVER_LLAMA_CPP else 'not met'}")
    singles = [key for key in SINGLE_LEVEL if key in summary]
    if singles:
        ahead = all(value > summary[key]["speedup_geomean"] for key in singles)
        theirs = ", ".join(f"{summary[key]['speedup_geomean']:.2f}x" for key in singles)
        lines.append(f"- ahead of every single-level pipeline ({theirs}): {'yes' if ahead else 'no'}")
    if summary[best].get("speedup_over_plain_geomean"):
        lines.append(f"- {summary[best]['speedup_over_plain_geomean']:.2f}x over (o), llama.cpp's stock kernels and "
                     "settings on the same BF16 file in our decoding loop (llama.cpp's own programs: `bench --set`)")
    # (o) is not built to match (i) bit for bit (stock kernels, one-row decoding), so it is not in the count
    differing = sum(row["differing_prompts"] for key, row in summary.items() if key != PLAIN)
    lines.append(f"- identity check: {differing} prompt runs differ from (i) across the speculative pipelines (goal 0)")
    return lines
