"""Kernel benchmark: MUL_MAT time and effective GB/s for N = 1..16, our kernels against llama.cpp's stock ones.

``python -m native.bench`` (what ``assistant bench --kernel`` runs) builds the patched llama.cpp if needed,
compiles ``mulmat.cpp`` against it, times every kernel on > 1 GB of model-shaped weights beside the
machine's measured read bandwidth, optionally runs ``llama-bench -p 1,2,4,8,16 -n 0`` on random-weight
Qwen2-shaped MXFP4 and BF16 models with our kernels on and off, and writes JSON, Markdown and a PNG chart.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
NS = (1, 2, 4, 8, 16)
KERNELS = ("mxfp4-ours", "mxfp4-repack", "mxfp4-stock", "bf16-ours", "bf16-stock",
           "q4_k-ours", "q4_k-repack", "q6_k-ours", "q6_k-stock")
# Measured when --kernels names them, not in the default run, which would then hold over a dozen 1.1 GB sets at
# once: Q5_K, stock's unrepacked Q4_K, and Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 (q8-gemm.h) against what llama.cpp
# runs for them (Q4_0 repacked on x86 AVX2 and ARM, the others plain).
MORE_KERNELS = ("q4_k-stock", "q5_k-ours", "q5_k-stock",
                "q8_0-ours", "q8_0-stock", "q4_0-ours", "q4_0-repack", "q4_0-stock", "q4_1-ours", "q4_1-stock",
                "q5_0-ours", "q5_0-stock", "q5_1-ours", "q5_1-stock")
ALL_KERNELS = KERNELS + MORE_KERNELS
# kind -> the stock kernels to compare ours with, the first one measured
STOCK_OF = {"mxfp4": ("mxfp4-repack",), "bf16": ("bf16-stock",), "q8_0": ("q8_0-stock",),
            "q4_0": ("q4_0-repack", "q4_0-stock"), "q4_1": ("q4_1-stock",), "q5_0": ("q5_0-stock",),
            "q5_1": ("q5_1-stock",), "q4_k": ("q4_k-repack", "q4_k-stock"),
            "q5_k": ("q5_k-stock",), "q6_k": ("q6_k-stock",)}
LABELS = {
    "mxfp4-ours": "MXFP4, ours (int8 dot products: AVX2, VNNI or AMX, by CPU)",
    "mxfp4-repack": "MXFP4, stock repack",
    "mxfp4-stock": "MXFP4, stock (no repack)",
    "bf16-ours": "BF16, ours",
    "bf16-stock": "BF16, stock",
    "q8_0-ours": "Q8_0, ours", "q8_0-stock": "Q8_0, stock",
    "q4_0-ours": "Q4_0, ours", "q4_0-repack": "Q4_0, stock repack", "q4_0-stock": "Q4_0, stock (no repack)",
    "q4_1-ours": "Q4_1, ours", "q4_1-stock": "Q4_1, stock",
    "q5_0-ours": "Q5_0, ours", "q5_0-stock": "Q5_0, stock", "q5_1-ours": "Q5_1, ours", "q5_1-stock": "Q5_1, stock",
    "q4_k-ours": "Q4_K, ours",
    "q4_k-repack": "Q4_K, stock repack",
    "q4_k-stock": "Q4_K, stock (no repack)",
    "q5_k-ours": "Q5_K, ours",
    "q5_k-stock": "Q5_K, stock",
    "q6_k-ours": "Q6_K, ours",
    "q6_k-stock": "Q6_K, stock",
}


def native_dir() -> Path:
    """<cache>/<key> of the current native inputs, building it when missing."""
    from native import build

    return build.ensure_built()


def mulmat_tool(directory: Path) -> Path:
    """The benchmark program, compiled once per build and source version."""
    source = HERE / "mulmat.cpp"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    tool = directory / "bin" / f"assistant-mulmat-bench-{digest}"
    if tool.exists():
        return tool
    from native import build

    include = build.trees(directory.parent)[0] / "vendor" / "llama.cpp" / "ggml" / "include"
    lib = directory / "bin"
    partial = tool.with_suffix(".part")
    subprocess.run(["c++", "-O3", "-march=native", "-std=c++17", f"-I{include}", str(source), "-o", str(partial),
                    f"-L{lib}", "-lggml", "-lggml-base", f"-Wl,-rpath,{lib}"], check=True)
    partial.rename(tool)
    return tool


@dataclass
class KernelRun:
    bandwidth_gbps: float
    results: list[dict]        # {kernel, n, seconds, gbps, seconds_median, cpu_share}
    weight_bytes: dict[str, int]
    fma_peak_gflops: float | None = None  # f32 multiply-add peak, fma_bits wide
    fma_bits: int | None = None
    read_strategies: dict[str, float] = field(default_factory=dict)  # GB/s of each way the bandwidth test read
    read_best: str = ""  # the strategy that set bandwidth_gbps, or the kernel whose effective rate exceeded them all


def run_mulmat(tool: Path, threads: int, gb: float, reps: int, kernels=KERNELS, ns=NS) -> KernelRun:
    out = subprocess.run([str(tool), "--threads", str(threads), "--gb", str(gb), "--reps", str(reps),
                          "--n", ",".join(map(str, ns)), "--kernels", ",".join(kernels)],
                         capture_output=True, text=True, check=True).stdout
    bandwidth, sizes, times, peak, strategies, read_best = 0.0, {}, {}, {}, {}, ""
    for line in out.splitlines():
        row = json.loads(line)
        if "read_strategy" in row:
            strategies[row["read_strategy"]] = row["gbps"]
        elif "read_best" in row:
            read_best = row["read_best"]
        elif "bandwidth_gbps" in row:
            bandwidth = row["bandwidth_gbps"]
        elif "fma_peak_gflops" in row:
            peak = row
        elif "rep" in row:
            times.setdefault((row["kernel"], row["n"]), []).append((row["seconds"], row["cpu_share"]))
        else:
            sizes[row["kernel"]] = row["weight_bytes"]
    results = []
    for (kernel, n), reps in times.items():
        best, share = min(reps)  # the least disturbed repetition
        results.append({"kernel": kernel, "n": n, "seconds": best, "gbps": sizes[kernel] / best / 1e9,
                        "seconds_median": statistics.median(s for s, _ in reps), "cpu_share": share})
    if bandwidth and results:
        # The speed of light is what memory was seen to deliver: a kernel that read faster than every strategy of
        # the bandwidth test proves the test low, so its rate is the limit (and named as its source).
        fastest = max(results, key=lambda r: r["gbps"])
        if fastest["gbps"] > bandwidth:
            bandwidth, read_best = fastest["gbps"], f"{fastest['kernel']} N={fastest['n']}"
    return KernelRun(bandwidth, results, sizes, peak.get("fma_peak_gflops") or None, peak.get("fma_bits"),
                     strategies, read_best)


def read_bandwidth(tool: Path, threads: int, gb: float = 1.1, reps: int = 8) -> float:
    """The machine's read bandwidth in GB/s, best of reps over a buffer well above L3: the physical limit.
    Best of several, because on a shared virtual machine single readings vary by a third."""
    out = subprocess.run([str(tool), "--threads", str(threads), "--gb", str(gb), "--reps", str(reps), "--kernels", ""],
                         capture_output=True, text=True, check=True).stdout
    return next(json.loads(line)["bandwidth_gbps"] for line in out.splitlines() if "bandwidth_gbps" in line)


def check_invariance(tool: Path, kernels=KERNELS) -> dict[str, dict]:
    """Per kernel: is every column of N = 1, 3, 8, 16 (1 and 2 threads) bit-identical to it computed alone?"""
    out = subprocess.run([str(tool), "--gb", "0.01", "--reps", "0", "--no-bandwidth", "--check-invariance",
                          "--kernels", ",".join(kernels)], capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if "batch_invariant" in line]
    return {r["kernel"]: {"batch_invariant": r["batch_invariant"], "max_abs_diff": r["max_abs_diff"]} for r in rows}


def llama_bench(directory: Path, model: Path, threads: int, reps: int, env: dict[str, str], prompts=NS,
                generate: int = 0) -> dict:
    """llama-bench -p 1,2,4,8,16 -n 0: milliseconds per prompt batch of each size; with ``generate`` also
    "tg<n>": milliseconds per generated token over n tokens."""
    cmd = [str(directory / "bin" / "llama-bench"), "-m", str(model), "-p", ",".join(map(str, prompts)),
           "-n", str(generate), "-t", str(threads), "-r", str(reps), "-o", "json"]
    run_env = dict(os.environ, LD_LIBRARY_PATH=str(directory / "bin"), **env)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=run_env).stdout
    return {row["n_prompt"] if row["n_gen"] == 0 else f"tg{row['n_gen']}":
            row["avg_ns"] / 1e6 / max(1, row["n_gen"]) for row in json.loads(out)}


def summary(run: KernelRun, bf16_widens: bool = False) -> dict:
    """The figures the issues ask for, from one run; with ``bf16_widens`` (the BF16 path widens to f32 FMAs as
    wide as the measured peak's: avx2, neon) also BF16's batch of 16 as a share of that peak."""
    t = {(r["kernel"], r["n"]): r for r in run.results}
    out = {}
    for kind, stocks in STOCK_OF.items():
        ours = f"{kind}-ours"
        if (ours, 1) not in t or (ours, 8) not in t:
            continue
        stock = next((k for k in stocks if (k, 1) in t), stocks[0])
        out[kind] = {
            "n8_over_n1": t[(ours, 8)]["seconds"] / t[(ours, 1)]["seconds"],
            "n1_fraction_of_bandwidth": t[(ours, 1)]["gbps"] / run.bandwidth_gbps if run.bandwidth_gbps else None,
        }
        if kind == "bf16" and bf16_widens and run.fma_peak_gflops and (ours, 16) in t:
            # every bf16 weight is one multiply-add per column: 2 flops x (bytes / 2) x 16 columns
            flops = 2 * run.weight_bytes[ours] / 2 * 16
            out[kind]["n16_fraction_of_fma_peak"] = flops / t[(ours, 16)]["seconds"] / 1e9 / run.fma_peak_gflops
        if (ours, 16) in t:
            out[kind]["n16_over_n1"] = t[(ours, 16)]["seconds"] / t[(ours, 1)]["seconds"]
        if (stock, 1) in t and (stock, 8) in t:
            out[kind]["speedup_vs_stock_n1"] = t[(stock, 1)]["seconds"] / t[(ours, 1)]["seconds"]
            out[kind]["speedup_vs_stock_n8"] = t[(stock, 8)]["seconds"] / t[(ours, 8)]["seconds"]
            if (ours, 16) in t and (stock, 16) in t:
                out[kind]["speedup_vs_stock_n16"] = t[(stock, 16)]["seconds"] / t[(ours, 16)]["seconds"]
            out[kind]["stock"] = stock
    return out


# The issues' targets per CPU class: (MXFP4, BF16) for N=8/N=1, vs stock at N=1 and N=8, N=1 share of bandwidth.
TARGETS = {
    "x86-64 AVX2": ("<= 1.5 / <= 1.5", ">= 1.0 / >= 1.0", ">= 2.0 / -", ">= 75% / >= 85%"),
    "default": ("<= 1.3 / <= 1.15", ">= 1.0 / >= 1.0", ">= 2.5 / >= 1.4", ">= 70% / >= 80%"),
}


def markdown(report: dict) -> str:
    cpu = report.get("cpu", {})
    lines = [f"# Kernel benchmark ({report['threads']} threads)", "",
             f"CPU: {cpu.get('model', '?')} [{cpu.get('class', '?')}]; our kernels: {report.get('kernels', '?')}; "
             f"llama.cpp's CPU variant: {report.get('cpu_variant', '?')}.", "",
             f"Read bandwidth (the speed of light): **{report['bandwidth_gbps']:.1f} GB/s**"
             + (f" ({report['read_best']}, the best of "
                + ", ".join(f"{k} {v:.1f}" for k, v in report.get("read_strategies", {}).items()) + ")"
                if report.get("read_best") else "")
             + (f"; f32 multiply-add peak ({report['fma_bits']}-bit): **{report['fma_peak_gflops']:.0f} GFLOP/s**"
                if report.get("fma_peak_gflops") else "") + ". Weight sets: "
             + ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in report["weight_bytes"].items()) + ".", "",
             "MUL_MAT over the whole set, best of the repetitions (ms, effective GB/s; `cpu_share` in the JSON "
             "below ~0.95 means other processes took our cores during that repetition):", "",
             "| kernel | " + " | ".join(f"N={n}" for n in NS) + " |", "|---" * (len(NS) + 1) + "|"]
    t = {(r["kernel"], r["n"]): r for r in report["results"]}
    for kernel in dict.fromkeys(r["kernel"] for r in report["results"]):
        cells = [f"{t[(kernel, n)]['seconds'] * 1e3:.0f} ms, {t[(kernel, n)]['gbps']:.1f}" if (kernel, n) in t else "-"
                 for n in NS]
        lines.append(f"| {LABELS.get(kernel, kernel)} | " + " | ".join(cells) + " |")
    s = report["summary"]
    extra = [kind for kind in ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1") if kind in s]  # issue 51's types, where measured
    lines += ["", "| figure | MXFP4 | BF16 | target (MXFP4 / BF16) |" + "".join(f" {k.upper()} |" for k in extra),
              "|---|---|---|---|" + "---|" * len(extra)]
    targets = TARGETS.get(cpu.get("class"), TARGETS["default"])
    rows = [("ours N=8 / ours N=1", "n8_over_n1", targets[0]),
            ("speedup vs stock, N=1", "speedup_vs_stock_n1", targets[1]),
            ("speedup vs stock, N=8", "speedup_vs_stock_n8", targets[2]),
            ("speedup vs stock, N=16", "speedup_vs_stock_n16", "-"),
            ("N=1 share of read bandwidth", "n1_fraction_of_bandwidth", targets[3]),
            ("N=16 share of the f32 FMA peak (BF16 widens to f32)", "n16_fraction_of_fma_peak", "-")]
    for label, key, target in rows:
        cells = []
        for kind in ("mxfp4", "bf16", *extra):
            v = s.get(kind, {}).get(key)
            cells.append("-" if v is None else (f"{v:.0%}" if "fraction" in key else f"{v:.2f}x"))
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {target} |" + "".join(f" {c} |" for c in cells[2:]))
    if any(kind in s for kind in ("q4_k", "q6_k")):  # issue 51's targets, N=1 against stock as llama.cpp runs it
        lines += ["", "| figure | Q4_K | Q6_K | target (Q4_K / Q6_K) |", "|---|---|---|---|"]
        for label, key, target in (("ours N=8 / ours N=1", "n8_over_n1", "<= 1.4 / <= 1.4"),
                                   ("ours N=16 / ours N=1", "n16_over_n1", "<= 2 / -"),
                                   ("speedup vs stock, N=1", "speedup_vs_stock_n1", ">= 1.5 / >= 1.0"),
                                   ("speedup vs stock, N=8", "speedup_vs_stock_n8", "- / -"),
                                   ("N=1 share of read bandwidth", "n1_fraction_of_bandwidth", "- / -")):
            cells = []
            for kind in ("q4_k", "q6_k"):
                v = s.get(kind, {}).get(key)
                cells.append("-" if v is None else (f"{v:.0%}" if "fraction" in key else f"{v:.2f}x"))
            lines.append(f"| {label} | {cells[0]} | {cells[1]} | {target} |")
    if report.get("invariance"):
        lines += ["", "Batch invariance (each column of N = 1, 3, 8, 16 at 1 and 2 threads bit-identical to that column "
                  "computed alone):", ""]
        for kernel, r in report["invariance"].items():
            verdict = "yes" if r["batch_invariant"] else f"no (max difference {r['max_abs_diff']:.3g})"
            lines.append(f"- {LABELS.get(kernel, kernel)}: {verdict}")
    for name, table in report.get("llama_bench", {}).items():
        lines += ["", f"`llama-bench -p 1,2,4,8,16 -n 0 -t {report['threads']}` on {name} (ms per batch):", "",
                  "| kernels | " + " | ".join(f"N={n}" for n in NS) + " | N=8 / N=1 |", "|---" * (len(NS) + 2) + "|"]
        ns = sorted(int(k) for k in next(iter(table.values())) if not str(k).startswith("tg"))
        if ns != list(NS):  # the K-quant run: -p 1,4,8,16 -n 64
            lines[-3:] = [f"`llama-bench -p {','.join(map(str, ns))} -n 64 -t {report['threads']}` on {name} (ms per "
                          "batch; tg64: ms per generated token):", "",
                          "| kernels | " + " | ".join(f"N={n}" for n in ns) + " | tg64 | N=8 / N=1 | N=16 / N=1 |",
                          "|---" * (len(ns) + 4) + "|"]
        for setting, ms in table.items():
            gen = {k: v for k, v in ms.items() if str(k).startswith("tg")}
            ms = {int(k): v for k, v in ms.items() if not str(k).startswith("tg")}
            if ns != list(NS):
                lines.append(f"| {setting} | " + " | ".join(f"{ms[n]:.1f}" for n in ns) + " | "
                             + " ".join(f"{v:.1f}" for v in gen.values()) + f" | {ms[8] / ms[1]:.2f} | {ms[16] / ms[1]:.2f} |")
                continue
            lines.append(f"| {setting} | " + " | ".join(f"{ms[n]:.1f}" for n in NS) + f" | {ms[8] / ms[1]:.2f} |")
    return "\n".join(lines) + "\n"


def chart(report: dict, path: Path) -> None:
    """Effective GB/s against N for every kernel, with the read bandwidth as the ceiling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for kernel in dict.fromkeys(r["kernel"] for r in report["results"]):
        rows = sorted((r for r in report["results"] if r["kernel"] == kernel), key=lambda r: r["n"])
        ax.plot([r["n"] for r in rows], [r["gbps"] for r in rows], marker="o",
                linestyle="-" if "ours" in kernel else "--", label=LABELS.get(kernel, kernel))
    ax.axhline(report["bandwidth_gbps"], color="black", linewidth=1, label="speed of light (best read)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(NS), [str(n) for n in NS])
    ax.set_xlabel("batch N (columns)")
    ax.set_ylabel("effective GB/s (weight bytes / time)")
    ax.set_title(f"MUL_MAT on > 1 GB of weights, {report['threads']} threads, "
                 f"{report.get('cpu', {}).get('class', '')}")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
