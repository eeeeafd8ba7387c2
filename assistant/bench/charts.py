"""PNG charts: per-prompt speedups and acceptance-ratio histograms per draft (the paper's Figures 5-6).

matplotlib is imported here only (it is the `bench` extra); without it the report says so and goes on.
"""

from __future__ import annotations

from pathlib import Path

from assistant.bench.pipelines import BASELINE, LABELS
from assistant.bench.summary import per_prompt_acceptance


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def speedups(workload: dict, path: Path) -> None:
    """One line per pipeline: its speedup over (i) on each prompt, prompts sorted by (iv)'s speedup."""
    plt = _pyplot()
    runs = {key: records for key, records in workload["runs"].items() if key != BASELINE}
    if not runs:
        return
    anchor = runs.get("mlsd-adaptive") or next(iter(runs.values()))
    order = sorted(range(len(anchor)), key=lambda i: anchor[i]["speedup"])
    fig, ax = plt.subplots(figsize=(10, 5))
    for key, records in runs.items():
        style = "--" if key.endswith("-stock") else "-"
        ax.plot(range(len(order)), [records[i]["speedup"] for i in order], style, marker=".", label=LABELS.get(key, key))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("prompt (sorted by the adaptive ML-SpecQD speedup)")
    ax.set_ylabel("speedup over the target alone")
    ax.set_title(f"Per-prompt speedups, workload {workload['workload']['title']}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def acceptance(workload: dict, path: Path) -> None:
    """Histogram over prompts of each draft's acceptance ratio, one panel per (pipeline, draft level)."""
    plt = _pyplot()
    panels = []
    for key in ("sd-draft", "sd-mxfp4", "mlsd", "llama.cpp"):
        records = workload["runs"].get(key)
        if not records:
            continue
        for level in range(1, len(records[0]["levels"])):
            values = per_prompt_acceptance(records, level)
            if values:
                role = records[0]["levels"][level]["role"]
                panels.append((f"{LABELS.get(key, key)}\nlevel {level}: {role}", values))
    if not panels:
        return
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (title, values) in zip(axes.flat, panels):
        ax.hist(values, bins=[i / 20 for i in range(21)], color="tab:blue", edgecolor="white")
        ax.set_xlim(0, 1)
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("acceptance ratio")
        ax.set_ylabel("prompts")
    fig.suptitle(f"Acceptance ratios per draft, workload {workload['workload']['title']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
