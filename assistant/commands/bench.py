"""Measure every pipeline of the ML-SpecQD paper, and llama.cpp's own speculative decoding, on the same GGUF
files in one interleaved run; write bench.json, bench.md (beside the paper's tables) and PNG charts.

Workload (a) is the trained bench pair; (b) the same pair padded to a memory-bound 1.64 GB target with
unchanged outputs. `--quick` is a one-minute smoke run on workload (a)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from assistant.errors import AssistantError

HELP = "benchmark speculative decoding pipelines against the target alone and llama.cpp; write a report"
QUICK = {"prompts": 2, "max_tokens": 32, "sweep_prompts": 1}
LIMIT_B = 12
SIDE_PROMPTS = 8  # --serving and --attached
DEMO_WORKLOAD = "demo"  # --workload demo: the demo model set, as --set demo
LARGE_WORKLOAD = "7b"  # --workload 7b: loading, memory and decoding on Qwen2.5-7B's shape (bench/large.py)


def add_arguments(parser):
    from assistant.bench.workloads import DEFAULT_MODELS, DEFAULT_PROMPTS

    parser.add_argument("--out", type=Path, default=Path("bench-out"),
                        help="directory for bench.json, bench.md and the charts (default: ./bench-out)")
    parser.add_argument("--workload", choices=("a", "b", "both", DEMO_WORKLOAD, LARGE_WORKLOAD), default=None,
                        help="a: bench pair, b: padded memory-bound pair (default: both; a with --quick); "
                             f"{DEMO_WORKLOAD}: the demo model set (SmolLM2) with chat prompts, as --set demo; "
                             f"{LARGE_WORKLOAD}: a random set of Qwen2.5-7B's shape (19 GB, made once in --cache): "
                             "loading cold and warm against reading, peak memory, decoding against the speed of "
                             "light, verification of 1-16 tokens, beside llama-bench")
    parser.add_argument("--set", metavar="NAME", dest="model_set",
                        help="benchmark a registered model set instead: its chain shapes (target alone, each draft, "
                             "the default chain) against llama.cpp's own programs on the same GGUF files "
                             "(llama-bench, llama-speculative-simple with each draft and with n-gram lookup)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK['prompts']} prompts, {QUICK['max_tokens']} tokens, 1-prompt llama.cpp sweep")
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS, metavar="FILE",
                        help="JSON lines with {'id', 'messages'} (default: the packaged coding requests)")
    parser.add_argument("--limit", type=int, help="use only the first N prompts (both workloads)")
    parser.add_argument("--limit-b", type=int, default=LIMIT_B,
                        help=f"prompts for workload b when --limit is not given (default {LIMIT_B}, as BENCHMARK.md's "
                        "baseline: memory-bound runs take minutes per prompt)")
    parser.add_argument("--max-tokens", type=int, help="new tokens per prompt (default 128)")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads for every pipeline (default 2)")
    parser.add_argument("--pipelines", help="comma-separated subset: target, sd-draft, sd-mxfp4, sd-ngram, mlsd, "
                        "mlsd-adaptive, sd-draft-mxfp4, mlsd-adaptive-mxfp4, sd-mxfp4-stock, mlsd-stock, "
                        "mlsd-adaptive-stock, llama.cpp (default: all)")
    parser.add_argument("--sweep-lengths", default="2,4,8", help="draft lengths tried for llama.cpp (default 2,4,8)")
    parser.add_argument("--kernel", action="store_true",
                        help="also run the kernel benchmark (python -m native.bench) and include its table and chart")
    parser.add_argument("--serving", action="store_true",
                        help="measure `assistant serve` instead: one pipeline answers the same prompts in process and "
                             "streamed through the server over loopback, alternating, on the default model set (the "
                             "demo set on a fresh machine); writes serving.json (default 8 prompts). With "
                             "--temperature T: the default chain against the target alone instead, each behind its "
                             "own server, --seeds seeds a prompt; writes serving-sampled.json")
    parser.add_argument("--attached", action="store_true",
                        help="measure the n-gram level instead: prompts that attach one of this package's source "
                             "files and ask for it back, answered with and without the n-gram level, alternating, "
                             "on the default model set; writes attached.json (default 8 prompts, 256 tokens)")
    parser.add_argument("--remote", action="store_true",
                        help="measure a remote target instead: ggml-rpc-servers in their own network namespace (as "
                             "root; else on loopback) hold the default model set's target, a relay adds each "
                             "--delays round trip; the chain over it against that target alone, alternating, with "
                             "the bytes each verification round sends; writes remote.json (default 8 prompts)")
    parser.add_argument("--remote-verify", type=Path, metavar="GGUF",
                        help="measure a remote target's verification cost instead: GGUF on a ggml-rpc-server on "
                             "loopback (--threads threads), verifying 8 tokens against 1 after a prompt, by the "
                             "server's own timings (ASSISTANT_RPC_TIMINGS) and the client's, with our kernels there "
                             "and with llama.cpp's stock ones; writes remote-verify.json")
    parser.add_argument("--drafts", metavar="SET",
                        help="measure drafts compressed from the model set SET's target instead: casts to fewer bits "
                             "and blocks dropped by a greedy search (--draft-steps), each with its agreement with "
                             "the target's own text, its cost per token and the predicted speedup, then the best "
                             "one measured as target <- it; writes drafts.json and drafts.md")
    parser.add_argument("--draft-steps", type=int, default=3, metavar="N",
                        help="blocks the greedy search drops, one a step, for --drafts (default 3)")
    parser.add_argument("--constrained", action="store_true",
                        help="measure constrained answers instead: twenty JSON schemas (serve's response_format) "
                             "answered under their grammar by the chain and by the target alone, and unconstrained "
                             "by the chain at the same lengths, alternating, on the default model set; writes "
                             "constrained.json")
    parser.add_argument("--temperature", metavar="T,...",
                        help="measure sampled speed instead: every method at each temperature (0: greedy) and --top-p, "
                             "--seeds seeds per prompt, against the target alone and llama-speculative-simple at the "
                             "same setting, draft lengths from --sweep-lengths; on --set NAME, --workload demo (the "
                             "default) or a workload's pair; writes sampled.json and sampled.md (default 8 prompts)")
    parser.add_argument("--top-p", default="1.0", metavar="P,...", help="top-p values for --temperature (default 1.0)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per prompt and setting for --temperature (default 2)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="passes over every method per prompt and seed for --temperature, in rotation; a "
                             "seed's time is their median (default 1; 3 steadies a prompt's ratio on a noisy VM)")
    parser.add_argument("--delays", default="0,2,10", metavar="MS,...",
                        help="added round-trip times for --remote, in milliseconds (default 0,2,10)")
    parser.add_argument("--models", type=Path, default=DEFAULT_MODELS,
                        help="directory holding bench-target/ and bench-draft/, or target/ and draft/ "
                             "(default: the packaged toy pair, the same trained pair as ../shared/models)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "assistant" / "bench",
                        help="where padded checkpoints and GGUF files are kept between runs")


def run(args) -> int:
    import time

    from assistant.bench import ceiling, charts, oracle, pipelines, report, runner, summary, workloads

    if args.threads < 1:
        raise AssistantError(f"--threads must be 1 or more, not {args.threads}")
    for option, value in (("--limit", args.limit), ("--limit-b", args.limit_b)):
        if value is not None and value < 1:
            raise AssistantError(f"{option} must be 1 or more, not {value}")
    try:
        lengths = tuple(int(x) for x in args.sweep_lengths.split(",") if x.strip())
    except ValueError:
        raise AssistantError(f"--sweep-lengths: not a list of integers: {args.sweep_lengths!r}") from None
    if args.serving:
        return _serving(args)
    if args.temperature is not None:
        return _sampled(args, lengths)
    if args.drafts:
        return _drafts(args)
    if args.constrained:
        from assistant.bench import constrained

        return _side_bench(args, "constrained answers", [], constrained.measure, "constrained.json", None,
                           constrained.report, default_tokens=200)
    if args.attached:
        return _attached(args)
    if args.remote:
        return _remote(args)
    if args.remote_verify:
        return _remote_verify(args)
    if args.model_set or args.workload == DEMO_WORKLOAD:
        return _model_set(args, lengths)
    if args.workload == LARGE_WORKLOAD:
        return _large(args)
    keys = [k.strip() for k in args.pipelines.split(",")] if args.pipelines else None
    specs = pipelines.select(keys)
    limit = args.limit or (QUICK["prompts"] if args.quick else None)
    prompts = workloads.load_prompts(args.prompts, limit)
    max_tokens = args.max_tokens or (QUICK["max_tokens"] if args.quick else 128)
    if max_tokens < 1:
        raise AssistantError(f"--max-tokens must be 1 or more, not {max_tokens}")
    chosen = args.workload or ("a" if args.quick else "both")
    keys_of_workloads = ["a", "b"] if chosen == "both" else [chosen]
    args.out.mkdir(parents=True, exist_ok=True)
    settings = runner.Settings(
        pipelines=specs, max_tokens=max_tokens, threads=args.threads,
        llama_cpp=keys is None or pipelines.LLAMA_CPP in keys, sweep_lengths=lengths,
        sweep_prompts=QUICK["sweep_prompts"] if args.quick else 2, log_dir=args.out / "logs",
    )
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    began = time.perf_counter()
    result = {
        "settings": {"max_tokens": max_tokens, "threads": args.threads, "n_ctx": settings.n_ctx, "greedy": True,
                     "prompts_file": str(args.prompts), "quick": args.quick,
                     "pipelines": [spec.key for spec in specs], "llama_cpp_sweep_lengths": list(lengths),
                     "llama_cpp_sweep_prompts": settings.sweep_prompts},
        "machine": report.machine(),
        "workloads": {},
    }
    for key in keys_of_workloads:
        workload = workloads.prepare(key, args.models, args.cache, log)
        chosen_prompts = prompts if key == "a" or limit else prompts[: args.limit_b]
        log(f"[bench] workload {workload.title}: {len(chosen_prompts)} prompts x {len(specs) + settings.llama_cpp} pipelines")
        record = runner.run_workload(workload, chosen_prompts, settings)
        record["summary"] = summary.summarize(record["runs"])
        result["workloads"][key] = record
        _charts(charts, record, args.out, key, log)
    result["machine"]["read_bandwidth_gbps"] = _read_bandwidth(args.threads, log)
    for record in result["workloads"].values():
        bandwidth, target_bytes = result["machine"]["read_bandwidth_gbps"], record["workload"]["file_bytes"]["target"]
        light = bandwidth * 1e9 / target_bytes if bandwidth else None
        record["ceiling"] = ceiling.ceiling(record["runs"], record.get("verify_costs"), light)
        record["oracle"] = oracle.oracle(record["runs"], record.get("verify_costs"), record.get("oracle_inputs"), light)
    if args.kernel:
        result["kernel"] = _kernel_bench(args.out, args.threads, args.quick, log)
    result["seconds"] = time.perf_counter() - began
    report.write_json(result, args.out / "bench.json")
    text = report.markdown(result)
    (args.out / "bench.md").write_text(text)
    print(text)
    log(f"[bench] wrote {args.out}/bench.json, bench.md and charts in {result['seconds'] / 60:.1f} min")
    return 0


def _sampled(args, lengths: tuple[int, ...]) -> int:
    """`--temperature T,...`: sampled speed by temperature, top-p and draft length (assistant/bench/sampled.py)."""

    from assistant.bench import report, sampled, workloads
    from native import build

    temperatures = sampled.parse_numbers("--temperature", args.temperature, 0.0, 10.0)
    top_ps = sampled.parse_numbers("--top-p", args.top_p, 0.01, 1.0)
    if args.seeds < 1:
        raise AssistantError(f"--seeds must be 1 or more, not {args.seeds}")
    if args.repeats < 1:
        raise AssistantError(f"--repeats must be 1 or more, not {args.repeats}")
    if not lengths or min(lengths) < 1:
        raise AssistantError(f"--sweep-lengths: give draft lengths of 1 or more, not {args.sweep_lengths!r}")
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    if args.workload in ("a", "b"):
        paths = workloads.prepare(args.workload, args.models, args.cache, say).paths()
        levels = [(role, paths[role]) for role in ("target", "mxfp4", "draft") if role in paths]
        name = f"workload {args.workload}"
    else:
        from assistant import modelsets

        if args.model_set:
            model_set = modelsets.get(args.model_set)
        else:
            from assistant.demo import ensure_demo_set

            model_set = ensure_demo_set(say=say)
        missing = model_set.missing_files()
        if missing:
            raise AssistantError(f"{missing[0]}: a file of model set {model_set.name!r} is missing")
        levels = [(level.role, level.path) for level in model_set.levels]
        name = f"model set {model_set.name!r}"
    prompts = workloads.load_prompts(args.prompts, args.limit or SIDE_PROMPTS)
    max_tokens = args.max_tokens or 128
    if max_tokens < 1:
        raise AssistantError(f"--max-tokens must be 1 or more, not {max_tokens}")
    machine = report.machine()
    grid = sampled.settings_grid(temperatures, top_ps)
    say(f"[bench] sampled speed, {name} on {machine['cpu']}: {len(grid)} settings x {len(prompts)} prompts x "
        f"{args.seeds} seeds x {args.repeats} passes, {max_tokens} tokens, {args.threads} threads")
    args.out.mkdir(parents=True, exist_ok=True)
    record = sampled.run(levels, prompts, grid, list(range(args.seeds)), max_tokens, args.threads, lengths,
                         build.tools_dir(), args.out / "logs", repeats=args.repeats)
    result = {"machine": machine, "workload": name, "record": record, "summary": sampled.summarize(record)}
    (args.out / "sampled.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    text = sampled.markdown(result)
    (args.out / "sampled.md").write_text(text)
    print(text)
    return 0


def _model_set(args, lengths: tuple[int, ...]) -> int:
    """`--set NAME` (or `--workload demo`): a registered model set against llama.cpp's programs."""

    from assistant import modelsets
    from assistant.bench import report, set_report, set_runner, workloads
    from native import build

    if args.model_set:
        model_set = modelsets.get(args.model_set)
    else:
        from assistant.demo import ensure_demo_set

        model_set = ensure_demo_set(say=lambda text: print(text, file=sys.stderr, flush=True))
    missing = model_set.missing_files()
    if missing:
        raise AssistantError(f"{missing[0]}: a file of model set {model_set.name!r} is missing")
    if model_set.target_rpc:
        raise AssistantError(f"model set {model_set.name!r} has a remote target: use `assistant bench --remote`")
    if not lengths or min(lengths) < 1:
        raise AssistantError(f"--sweep-lengths: give draft lengths of 1 or more, not {args.sweep_lengths!r}")
    prompts = workloads.load_prompts(args.prompts, args.limit or (QUICK["prompts"] if args.quick else None))
    max_tokens = args.max_tokens or (QUICK["max_tokens"] if args.quick else 128)
    if max_tokens < 1:
        raise AssistantError(f"--max-tokens must be 1 or more, not {max_tokens}")
    settings = set_runner.SetSettings(max_tokens=max_tokens, threads=args.threads, sweep_lengths=lengths,
                                      sweep_prompts=QUICK["sweep_prompts"] if args.quick else 2,
                                      log_dir=args.out / "logs")
    args.out.mkdir(parents=True, exist_ok=True)
    machine = report.machine()
    print(f"[bench] model set {model_set.name!r} on {machine['cpu']}: {len(prompts)} prompts x {max_tokens} tokens, "
          f"{args.threads} threads", file=sys.stderr, flush=True)
    record = set_runner.run(model_set, prompts, settings, build.tools_dir())
    record["summary"] = set_report.summarize(record)
    result = {"settings": {"max_tokens": max_tokens, "threads": args.threads, "n_ctx": settings.n_ctx,
                           "greedy": True, "prompts_file": str(args.prompts),
                           "llama_cpp_sweep_lengths": list(lengths), "llama_cpp_sweep_prompts": settings.sweep_prompts},
              "machine": machine, "set": record}
    for records in record["runs"].values():
        for run in records:
            run.pop("tokens", None)
    (args.out / "bench.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    text = set_report.markdown(result)
    (args.out / "bench.md").write_text(text)
    print(text)
    return 0


def _drafts(args) -> int:
    """`--drafts SET`: compressed drafts of SET's target, measured and ranked (bench/drafts.py)."""
    from assistant import modelsets
    from assistant.bench import drafts, report

    if args.draft_steps < 0:
        raise AssistantError(f"--draft-steps must be 0 or more, not {args.draft_steps}")
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    machine = report.machine()
    model_set = modelsets.get(args.drafts)
    say(f"[bench] compressed drafts of {model_set.name!r} on {machine['cpu']} ({machine['kernels']})")
    result = drafts.run(model_set, args.cache, args.threads, args.draft_steps, say=say)
    result["machine"] = machine
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(result, args.out / "drafts.json")
    text = drafts.markdown(result, machine)
    (args.out / "drafts.md").write_text(text)
    print(text)
    return 0


def _serving(args) -> int:
    """`--serving`: the server's tokens/s over the in-process pipeline's, on the same prompts."""
    from assistant.bench import serving, workloads

    prompts = workloads.load_prompts(args.prompts, args.limit or SIDE_PROMPTS)
    if args.temperature is not None:
        from assistant.bench import sampled

        temperatures = sampled.parse_numbers("--temperature", args.temperature, 0.01, 10.0)
        if len(temperatures) != 1 or args.seeds < 1:
            raise AssistantError("--serving takes one --temperature above 0 and --seeds of 1 or more")
        measure = lambda *rest, say: serving.measure_sampled(*rest, temperatures[0], args.seeds, say=say)  # noqa: E731
        return _side_bench(args, "the chain against the target alone through the server", prompts, measure,
                           "serving-sampled.json", None, serving.sampled_report)
    return _side_bench(args, "serving overhead", prompts, serving.measure, "serving.json", "served_over_direct",
                       "served / direct tokens/s")


def _attached(args) -> int:
    """`--attached`: tokens/s with the n-gram level over without it, on prompts that copy an attached file."""
    from assistant.bench import attached

    return _side_bench(args, "n-gram level on attached files", attached.edit_prompts(args.limit or SIDE_PROMPTS),
                       attached.measure, "attached.json", "with_over_without", "with / without the n-gram level, tokens/s",
                       default_tokens=256)  # an edited file is a long answer


def _remote(args) -> int:
    """`--remote`: the chain over a remote target against that target alone, at each added round trip."""
    from assistant.bench import remote, workloads

    try:
        delays = [float(delay) for delay in args.delays.split(",") if delay.strip()]
    except ValueError:
        raise AssistantError(f"--delays: not a list of milliseconds: {args.delays!r}") from None
    if not delays or min(delays) < 0:
        raise AssistantError(f"--delays: give one or more round-trip times of 0 ms or more, not {args.delays!r}")
    prompts = workloads.load_prompts(args.prompts, args.limit or SIDE_PROMPTS)
    measure = lambda *rest, say: remote.measure(*rest, delays=delays, say=say)  # noqa: E731
    return _side_bench(args, "remote target", prompts, measure, "remote.json", None, remote.report)


def _remote_verify(args) -> int:
    """`--remote-verify GGUF`: verifying 8 tokens against 1 on a remote target, by the server's clock."""

    from assistant.bench import remote_verify, report

    if not args.remote_verify.is_file():
        raise AssistantError(f"{args.remote_verify}: no such GGUF file")
    machine = report.machine()
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    say(f"[bench] remote verification cost on {machine['cpu']} ({machine['kernels']}): {args.remote_verify}")
    result = remote_verify.measure(args.remote_verify, args.threads, say=say)
    result["machine"] = machine
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "remote-verify.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(remote_verify.report(result))
    return 0


def _side_bench(args, title: str, prompts: list[dict], measure, filename: str, ratio: str | None, ratio_text,
                default_tokens: int = 128) -> int:
    """A one-question benchmark on the default model set (the demo set on a fresh machine): run ``measure``,
    write its JSON with the machine beside it, print the geomean ratio it answers with."""

    from assistant.bench import report
    from assistant.demo import model_set_or_demo

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    model_set = model_set_or_demo(say=say)
    machine = report.machine()
    max_tokens = args.max_tokens or default_tokens
    say(f"[bench] {title} on {machine['cpu']} ({machine['cpu_class']}, {machine['kernels']}), model set "
        f"{model_set.name!r}, {len(prompts)} prompts x {max_tokens} tokens, {args.threads} threads")
    result = measure(model_set, prompts, max_tokens, args.threads, say=say)
    result["machine"] = machine
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(result, args.out / filename)
    if ratio is None:  # ratio_text makes the whole report
        print(ratio_text(result))
    else:
        print(f"{ratio_text} (geomean over {len(prompts)} prompts, identical answers): {result[ratio]:.3f}")
    return 0


def _large(args) -> int:
    """`--workload 7b`: bench/large.py's figures, written to large.json and large.md."""
    from assistant.bench import large, report
    from native import bench as kernel_bench

    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    files = large.prepare(args.cache, say=say)
    bandwidth = _read_bandwidth(args.threads, say)
    result = large.run(files, kernel_bench.native_dir() / "bin", bandwidth, args.threads, say=say)
    result["summary"] = large.summary(result)
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(result, args.out / "large.json")
    text = large.markdown(result)
    (args.out / "large.md").write_text(text)
    print(text)
    return 0


def _read_bandwidth(threads: int, log) -> float | None:
    """Measured read bandwidth (GB/s): with the target's size it gives plain decoding's speed of light."""
    from native import bench as kernel_bench

    log("[bench] measuring read bandwidth")
    try:
        return kernel_bench.read_bandwidth(kernel_bench.mulmat_tool(kernel_bench.native_dir()), threads)
    except (OSError, subprocess.SubprocessError, StopIteration) as error:
        log(f"[bench] read bandwidth not measured ({error}); the speed-of-light column stays empty")
        return None


def _charts(charts, record: dict, out: Path, key: str, log) -> None:
    try:
        charts.speedups(record, out / f"speedups-{key}.png")
        charts.acceptance(record, out / f"acceptance-{key}.png")
    except ImportError:
        log("[bench] matplotlib is not installed: no charts (pip install matplotlib)")


def _kernel_bench(out: Path, threads: int, quick: bool, log) -> dict:
    """Run the kernel helper's benchmark in its own process and fold its JSON and Markdown in."""
    import subprocess

    directory = out / "kernel"
    root = Path(__file__).resolve().parents[2]
    log("[bench] kernel sweep: python -m native.bench")
    command = [sys.executable, "-m", "native.bench", "--threads", str(threads), "--out", str(directory)]
    done = subprocess.run(command + (["--reps", "1"] if quick else []), cwd=root, env=dict(os.environ))
    if done.returncode != 0:
        raise AssistantError(f"the kernel benchmark (python -m native.bench) failed with exit status {done.returncode}")
    data = json.loads((directory / "kernels.json").read_text())
    if (directory / "kernels.png").exists():
        (out / "kernels.png").write_bytes((directory / "kernels.png").read_bytes())
    data["markdown"] = (directory / "kernels.md").read_text() if (directory / "kernels.md").exists() else ""
    return data
