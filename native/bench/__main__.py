"""python -m native.bench [--threads 2] [--gb 1.1] [--reps 5] [--llama-bench] [--out DIR]"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from assistant import cpu
from assistant.engine import backend
from native import bench
from native.bench import models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m native.bench", description=bench.__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="threads for every kernel and the bandwidth test")
    parser.add_argument("--gb", type=float, default=1.1, help="size of each weight set in GB (keep it above L3)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions, interleaved across kernels")
    parser.add_argument("--kernels", default=",".join(bench.KERNELS), help="comma-separated subset of kernels")
    parser.add_argument("--llama-bench", action="store_true",
                        help="also run llama-bench on random ~1.1B Qwen2-shaped MXFP4 and BF16 models, kernels on/off")
    parser.add_argument("--llama-bench-kquant", action="store_true",
                        help="also run llama-bench -p 1,4,8,16 -n 64 on a random Qwen2.5-1.5B shape as Q4_K_M, "
                             "K-quant kernels on/off")
    parser.add_argument("--models-dir", type=Path, default=Path.home() / ".cache" / "assistant" / "bench-models")
    parser.add_argument("--out", type=Path, default=Path("bench-out") / "kernels",
                        help="directory for kernels.json, kernels.md, kernels.png")
    args = parser.parse_args(argv)

    directory = bench.native_dir()
    tool = bench.mulmat_tool(directory)
    print(f"[bench] {args.threads} threads, {args.gb} GB per weight set, {args.reps} repetitions", file=sys.stderr)
    run = bench.run_mulmat(tool, args.threads, args.gb, args.reps, kernels=args.kernels.split(","))
    report = {"threads": args.threads, "bandwidth_gbps": run.bandwidth_gbps, "read_best": run.read_best,
              "read_strategies": run.read_strategies, "fma_peak_gflops": run.fma_peak_gflops,
              "fma_bits": run.fma_bits, "weight_bytes": run.weight_bytes,
              "results": sorted(run.results, key=lambda r: (bench.ALL_KERNELS.index(r["kernel"])
                                                            if r["kernel"] in bench.ALL_KERNELS else 99, r["n"])),
              "build": directory.name}
    this = cpu.this_cpu()
    report["cpu"] = {"model": this.model, "class": this.kind}
    report["kernels"] = backend.kernel_description()
    report["cpu_variant"] = backend.llama_cpu_variant()
    widens = any(f"bf16={path}" in report["kernels"] for path in ("avx2", "neon"))  # not AMX, not 512-bit FMAs
    report["summary"] = bench.summary(run, bf16_widens=widens)
    report["invariance"] = bench.check_invariance(tool, kernels=args.kernels.split(","))

    if args.llama_bench:
        report["llama_bench"] = {}
        for kind, var in (("mxfp4", "ASSISTANT_MXFP4_KERNEL"), ("bf16", "ASSISTANT_BF16_KERNEL")):
            model = models.random_qwen2(args.models_dir / f"{models.Shape().name}.{kind}.gguf", kind)
            print(f"[bench] llama-bench on {model.name}", file=sys.stderr)
            table = {}
            for _ in range(2):  # alternate on/off twice, keep the faster of each, so drift hits both
                for setting, env in (("ours", {}), ("stock", {var: "stock"})):
                    ms = bench.llama_bench(directory, model, args.threads, 3, env)
                    table[setting] = {n: min(ms[n], table.get(setting, {}).get(n, float("inf"))) for n in ms}
            report["llama_bench"][f"{model.name}"] = table
    if args.llama_bench_kquant:
        report.setdefault("llama_bench", {})
        source = models.random_qwen2(args.models_dir / f"{models.QWEN25_1_5B.name}.bf16.gguf", "bf16", models.QWEN25_1_5B)
        model = models.quantized(source, "Q4_K_M", directory / "bin")
        print(f"[bench] llama-bench on {model.name}", file=sys.stderr)
        table = {}
        for _ in range(2):
            for setting, env in (("ours", {}), ("stock", {"ASSISTANT_KQUANT_KERNEL": "stock"})):
                ms = bench.llama_bench(directory, model, args.threads, 3, env, prompts=(1, 4, 8, 16), generate=64)
                table[setting] = {n: min(ms[n], table.get(setting, {}).get(n, float("inf"))) for n in ms}
        report["llama_bench"][model.name] = table

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kernels.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "kernels.md").write_text(bench.markdown(report))
    bench.chart(report, args.out / "kernels.png")
    print(bench.markdown(report))
    print(f"[bench] wrote {args.out}/kernels.json, kernels.md, kernels.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
