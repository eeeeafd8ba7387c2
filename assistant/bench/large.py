"""Workload 7b: a random-weight set of Qwen2.5-7B's shape, for what only size shows.

Loading time against the time to read the files (cold and warm), peak memory against the files' size, decoding
against the speed of light (the machine's read bandwidth over the bytes a token reads), and what verifying 1 to
16 tokens costs, beside llama.cpp's llama-bench on the same files; the target held both ways our kernels can
hold it (copied into their layout, or read where the file is mapped: ASSISTANT_WEIGHTS). Speed does not
depend on the weights' values, so the files are written with random matrices reused across layers
(native/bench/models.py), in minutes, and kept in the benchmark's cache; acceptance comes from the real and toy
pairs of the other workloads.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from assistant.cpu import STOCK_KERNELS
from assistant.engine.mapped_weights import read_in_huge_pages
from assistant.errors import AssistantError

CHUNK = 16 << 20
VERIFY_BATCHES = (1, 2, 4, 8, 16)


def qwen7b_shape():
    from native.bench.models import Shape

    return Shape(hidden=3584, layers=28, intermediate=18944, heads=28, kv_heads=4, vocab=152064)


def prepare(cache: Path, shape=None, say=print) -> dict[str, Path]:
    """{"target": BF16 file, "mxfp4": its MXFP4 cast} of ``shape`` (Qwen2.5-7B's by default) in ``cache``."""
    from assistant import diskspace
    from native.bench.models import random_qwen2

    shape = shape or qwen7b_shape()
    directory = Path(cache) / "large" / shape.name
    files = {"target": directory / "target.bf16.gguf", "mxfp4": directory / "target.mxfp4.gguf"}
    params = shape.layers * (2 * shape.hidden ** 2 + 2 * shape.hidden * shape.hidden // shape.heads * shape.kv_heads
                             + 3 * shape.hidden * shape.intermediate) + 2 * shape.vocab * shape.hidden
    missing = {role: path for role, path in files.items() if not path.exists()}
    if missing:
        need = params * (2 if "target" in missing else 0) + params * 17 // 32 * ("mxfp4" in missing)
        diskspace.require({directory: ("the 7B-shape benchmark files", need)}, "bench --workload 7b")
    for role, path in missing.items():
        say(f"[bench] writing the {role} of {shape.name} ({path})")
        random_qwen2(path, "bf16" if role == "target" else "mxfp4", shape)
    return files


def drop_from_cache(*paths: Path) -> None:
    """Evict files' pages from the page cache (no privilege needed), so the next read comes from the disk."""
    for path in paths:
        with open(path, "rb") as handle:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def warm_up(paths) -> None:
    """The files in the page cache whole (in 2 MB pages, as our loader reads them for mapped weights), so that
    a warm measurement reads nothing from the disk: this machine's memory holds the set's files, but not beside
    a packed copy of the target as well."""
    for path in paths:
        read_in_huge_pages(path)


def read_seconds(paths) -> float:
    """Seconds to read the files through, as a loader at best would."""
    buffer = bytearray(CHUNK)
    started = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass
    return time.perf_counter() - started


def probe(paths: list[Path], tokens: int, threads: int, env: dict[str, str] | None = None) -> dict:
    """In a process of its own (``env`` added to its environment): load the chain of ``paths`` and decode
    ``tokens`` greedy tokens."""
    command = [sys.executable, "-m", "assistant.bench.large", str(tokens), str(threads), *map(str, paths)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise AssistantError(f"loading {paths[0].name} for the 7B workload failed: {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _probe_main(argv: list[str]) -> None:
    from assistant.speculative import Pipeline, Sampling

    tokens, threads, paths = int(argv[0]), int(argv[1]), [Path(p) for p in argv[2:]]
    started = time.perf_counter()
    pipeline = Pipeline.load(paths, threads=threads, ngram=False)
    load = time.perf_counter() - started
    answer = pipeline.generate("def quicksort(items):", Sampling(), tokens)
    answer.finish()
    stats = answer.stats
    # the first new token comes with the prompt's evaluation: decoding is the tokens after it
    decode = (stats.new_tokens - 1) / max(stats.seconds - stats.first_token_seconds, 1e-9)
    print(json.dumps({"load_seconds": load, "new_tokens": stats.new_tokens, "decode_tokens_per_second": decode,
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "n_ctx": pipeline.n_ctx}))
    pipeline.close()


def llama_bench(bin_dir: Path, model: Path, threads: int, env: dict[str, str]) -> dict:
    """llama-bench on ``model``: ms per batch of 1..16 tokens and the decoding rate of 16 tokens."""
    command = [str(bin_dir / "llama-bench"), "-m", str(model), "-p", ",".join(map(str, VERIFY_BATCHES)), "-n", "16",
               "-r", "1", "-t", str(threads), "-o", "json"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    if done.returncode != 0:
        raise AssistantError(f"llama-bench failed on {model.name}: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    rows = json.loads(done.stdout)
    batches = {row["n_prompt"]: row["avg_ns"] / 1e6 for row in rows if row["n_gen"] == 0}
    decode = next((row["avg_ts"] for row in rows if row["n_gen"] > 0), None)
    return {"batch_ms": batches, "decode_tokens_per_second": decode}


STOCK = {**STOCK_KERNELS, "ASSISTANT_ATTENTION": "stock"}
# the two ways our kernels hold a 16-bit target (native/README.md): a copy in their layout, or the file's rows
WEIGHTS = {"packed": {"ASSISTANT_WEIGHTS": "packed"}, "mapped": {"ASSISTANT_WEIGHTS": "mapped"}}


def run(files: dict[str, Path], bin_dir: Path, bandwidth_gbps: float | None, threads: int = 2, tokens: int = 16,
        say=print) -> dict:
    """Every figure of the workload, each measured in this one run."""
    from assistant.engine.gguf_header import read_header

    target, copy = files["target"], files["mxfp4"]
    sizes = {role: path.stat().st_size for role, path in files.items()}
    result = {"files": {role: str(path) for role, path in files.items()}, "file_bytes": sizes, "threads": threads}
    for state in ("cold", "warm"):
        for weights, env in WEIGHTS.items():
            if state == "cold":
                drop_from_cache(target)
            else:  # what the packed copy of a run before pushed out of the page cache comes back first
                warm_up([target])
            say(f"[bench] 7b: reading the target ({state})")
            result[f"read_seconds_{state}_{weights}"] = read_seconds([target])
            if state == "cold":
                drop_from_cache(target)
            say(f"[bench] 7b: loading the target alone ({state}, {weights} weights) and decoding {tokens} tokens")
            result[f"target_{state}_{weights}"] = probe([target], tokens, threads, env)
    for weights, env in WEIGHTS.items():
        for state in ("cold", "warm"):  # keys without the state are the warm ones
            say(f"[bench] 7b: loading the target and its MXFP4 copy ({state}, {weights} weights)")
            key = weights if state == "warm" else f"cold_{weights}"
            if state == "cold":
                drop_from_cache(target, copy)
            else:
                warm_up([target, copy])
            result[f"read_seconds_set_{key}"] = read_seconds([target, copy])
            if state == "cold":
                drop_from_cache(target, copy)
            result[f"chain_{key}"] = probe([target, copy], tokens, threads, env)
    light = bandwidth_gbps * 1e9 / bytes_per_token(read_header(target)) if bandwidth_gbps else None
    result["bandwidth_gbps"], result["speed_of_light_tokens_per_second"] = bandwidth_gbps, light  # reads only
    for role, path in (("target", target), ("mxfp4", copy)):
        for kernels, env in (("ours", {}), ("ours-mapped", WEIGHTS["mapped"]), ("stock", STOCK)):
            if kernels == "ours-mapped" and role != "target":
                continue
            say(f"[bench] 7b: llama-bench on the {role}, {kernels} kernels")
            warm_up([path])
            result[f"llama_bench_{role}_{kernels}"] = llama_bench(bin_dir, path, threads, env)
    return result


def bytes_per_token(header) -> int:
    """What decoding one token reads: every weight but the embedding table, of which it reads one row (unless
    the output projection is that table, tied)."""
    tied = not any(t.name == "output.weight" for t in header.tensors)
    return sum(t.nbytes for t in header.tensors if tied or t.name != "token_embd.weight")


def summary(result: dict) -> dict:
    """The issue's ratios: peak memory over the files, loading over reading, decoding over the speed of light."""
    sizes = result["file_bytes"]
    light = result["speed_of_light_tokens_per_second"]
    out = {}
    for weights in WEIGHTS:
        tail = "" if weights == "packed" else "_mapped"  # the packed figures keep their names
        warm, chain = result[f"target_warm_{weights}"], result[f"chain_{weights}"]
        out[f"target_peak_over_file{tail}"] = warm["peak_rss_bytes"] / sizes["target"]
        out[f"chain_peak_over_files{tail}"] = chain["peak_rss_bytes"] / (sizes["target"] + sizes["mxfp4"])
        out[f"chain_load_over_read{tail}"] = chain["load_seconds"] / result[f"read_seconds_set_{weights}"]
        out[f"chain_load_over_read_cold{tail}"] = (result[f"chain_cold_{weights}"]["load_seconds"]
                                                   / result[f"read_seconds_set_cold_{weights}"])
        for state in ("cold", "warm"):
            out[f"load_over_read_{state}{tail}"] = (result[f"target_{state}_{weights}"]["load_seconds"]
                                                    / result[f"read_seconds_{state}_{weights}"])
        if light:
            out[f"decode_over_light{tail}"] = warm["decode_tokens_per_second"] / light
    ours = result["llama_bench_target_ours"]["batch_ms"]
    out["target_verify_16_over_1"] = ours[16] / ours[1] if 16 in ours and 1 in ours else None
    return out


def markdown(result: dict) -> str:
    s = summary(result)
    gb = lambda n: f"{n / 1e9:.2f} GB"  # noqa: E731

    def loading(weights: str, state: str) -> str:
        ratio = s[f"load_over_read_{state}" + ("" if weights == "packed" else "_mapped")]
        return f"{result[f'target_{state}_{weights}']['load_seconds']:.1f} s ({ratio:.2f}x reading)"
    lines = [
        "## Workload 7b: Qwen2.5-7B's shape, random weights",
        "",
        f"Files: target {gb(result['file_bytes']['target'])} (BF16), MXFP4 copy {gb(result['file_bytes']['mxfp4'])}; "
        f"{result['threads']} threads; read bandwidth {result['bandwidth_gbps'] or 0:.1f} GB/s.",
        "",
        "| measure (target alone) | packed: cold | packed: warm | mapped: cold | mapped: warm |",
        "| --- | --- | --- | --- | --- |",
        "| reading the target | " + " | ".join(f"{result[f'read_seconds_{state}_{weights}']:.1f} s"
                                              for weights in WEIGHTS for state in ("cold", "warm")) + " |",
        "| loading it | " + " | ".join(loading(weights, state) for weights in WEIGHTS for state in ("cold", "warm")) + " |",
        "",
    ]
    for weights in WEIGHTS:
        tail = "" if weights == "packed" else "_mapped"
        warm, chain = result[f"target_warm_{weights}"], result[f"chain_{weights}"]
        lines.append(
            f"{weights.capitalize()} weights (ASSISTANT_WEIGHTS={weights}): peak RSS target alone "
            f"{gb(warm['peak_rss_bytes'])} ({s['target_peak_over_file' + tail]:.2f}x its file), target + MXFP4 copy "
            f"{gb(chain['peak_rss_bytes'])} ({s['chain_peak_over_files' + tail]:.2f}x the files, loaded in "
            f"{chain['load_seconds']:.1f} s warm, {s['chain_load_over_read' + tail]:.2f}x reading them, "
            f"{result['chain_cold_' + weights]['load_seconds']:.1f} s cold, {s['chain_load_over_read_cold' + tail]:.2f}x, decoding "
            f"{chain['decode_tokens_per_second']:.2f} tokens/s); decoding (target alone) {warm['decode_tokens_per_second']:.2f} tokens/s"
            + (f", {s['decode_over_light' + tail]:.2f} of the speed of light "
               f"({result['speed_of_light_tokens_per_second']:.2f})." if s.get("decode_over_light" + tail) else "."))
    lines += [
        "",
        "| llama-bench | " + " | ".join(f"N={n} ms" for n in VERIFY_BATCHES) + " | decode tokens/s |",
        "| --- | " + " | ".join("---" for _ in VERIFY_BATCHES) + " | --- |",
    ]
    for key in ("target_ours", "target_ours-mapped", "target_stock", "mxfp4_ours", "mxfp4_stock"):
        row = result[f"llama_bench_{key}"]
        cells = " | ".join(f"{row['batch_ms'].get(n, float('nan')):.1f}" for n in VERIFY_BATCHES)
        lines.append(f"| {key.replace('_', ', ')} | {cells} | {row['decode_tokens_per_second'] or 0:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    _probe_main(sys.argv[1:])
