"""The interleaved run of `bench --set`: on each prompt every method once, ours and llama.cpp's alternating.

Alternating (ours, baseline, ours, baseline, ..., the order rotated from prompt to prompt) makes a busy
machine slow both sides alike, so the ratios of one run compare like with like. llama-speculative-simple's
draft length is chosen first by a small sweep per draft (every row kept for the report); its best length is
what runs interleaved. Our pipelines are warmed up once and start every prompt from empty caches, as
llama.cpp's programs do.
"""

from __future__ import annotations

import itertools
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from assistant.bench import llamabench, llamacpp, set_methods
from converters.progress import Steps
from assistant.bench.runner import WARMUP_TOKENS, WorkerProcess
from assistant.bench.set_methods import NGRAM_BASELINE, TARGET, Method


@dataclass
class SetSettings:
    max_tokens: int = 128
    threads: int = 2
    n_ctx: int = 4096
    sweep_lengths: tuple[int, ...] = (2, 4, 8)
    sweep_prompts: int = 2
    log_dir: Path | None = None
    show_progress: bool | None = None


def run(model_set, prompts: list[dict], settings: SetSettings, bin_dir: Path) -> dict:
    import tempfile

    log_dir = settings.log_dir or Path(tempfile.mkdtemp(prefix="assistant-bench-set-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    ours, baselines = set_methods.ours(model_set), set_methods.baselines(model_set)
    drafted = [method for method in baselines if set_methods.speculative_with_draft(method)]
    sweep_prompts = min(settings.sweep_prompts, len(prompts))
    steps = (len(ours) + len(drafted) * len(settings.sweep_lengths) * sweep_prompts
             + len(prompts) * (len(ours) + len(baselines)))
    progress = Steps(f"bench --set {model_set.name}", steps, settings.show_progress)
    began = time.perf_counter()
    worker = WorkerProcess("ours", {}, log_dir / f"worker-set-{model_set.name}.log")
    try:
        worker.call("load", n_ctx=settings.n_ctx, threads=settings.threads,
                    pipelines={method.key: method.worker_spec(model_set) for method in ours})
        prepared = [worker.call("prompt_text", pipeline=TARGET, messages=prompt["messages"]) for prompt in prompts]
        for method in ours:  # first touch of weights, thread pools and buffers
            progress.step(f"warm-up {method.key}")
            worker.call("run", pipeline=method.key, messages=prompts[0]["messages"], max_tokens=WARMUP_TOKENS)
        sweep = _sweep(model_set, drafted, prepared[:sweep_prompts], settings, bin_dir, progress)
        lengths = {key: max(rows, key=lambda row: row["tokens_per_second"])["draft_length"]
                   for key, rows in _by_method(sweep).items()}
        runs: dict[str, list[dict]] = {method.key: [] for method in [*ours, *baselines]}
        order = [method for pair in itertools.zip_longest(ours, baselines) for method in pair if method]
        for index, prompt in enumerate(prompts):
            shift = index % len(order)
            for method in order[shift:] + order[:shift]:
                name = prompt.get("id", str(index))
                progress.step(f"{name} {method.key}")
                if method.ours:
                    reply = worker.call("run", pipeline=method.key, messages=prompt["messages"],
                                        max_tokens=settings.max_tokens)
                else:
                    reply = _baseline(method, model_set, prepared[index], lengths.get(method.key), settings, bin_dir)
                runs[method.key].append(_record(name, reply))
            if not progress.enabled:  # a log file gets one line a prompt: a busy machine can take minutes each
                print(f"[bench] prompt {index + 1}/{len(prompts)} ({name}) done after "
                      f"{(time.perf_counter() - began) / 60:.1f} min", file=sys.stderr, flush=True)
    finally:
        worker.close()
        progress.finish()
    _check_identity(runs)
    return {
        "model_set": {"name": model_set.name, "description": model_set.description,
                      "levels": [{"role": level.role, "path": str(level.path), "bytes": level.size_bytes}
                                 for level in model_set.levels]},
        "methods": [{"key": method.key, "label": method.label, "program": method.program, "ours": method.ours,
                     "stock_kernels": method.stock, "draft_length": lengths.get(method.key)}
                    for method in [*ours, *baselines]],
        "order": [method.key for method in order],
        "prompts": [{"id": prompt.get("id", str(index)), "tokens": prepared[index]["tokens"]}
                    for index, prompt in enumerate(prompts)],
        "templated": all(prepared_prompt["templated"] for prepared_prompt in prepared),
        "llama_cpp_sweep": sweep,
        "runs": runs,
        "seconds": time.perf_counter() - began,
    }


def _baseline(method: Method, model_set, prompt: dict, draft_length: int | None, settings: SetSettings,
              bin_dir: Path) -> dict:
    target = model_set.target.path
    if method.program == llamabench.PROGRAM:
        return llamabench.run(bin_dir, target, prompt["tokens"], settings.max_tokens, settings.threads,
                              method.env).as_result()
    draft = model_set.levels[method.levels[1]].path if len(method.levels) > 1 else None
    spec_type = llamacpp.NGRAM if method.key == NGRAM_BASELINE else llamacpp.DRAFT
    result = llamacpp.run(bin_dir, target, draft, prompt["text"], settings.max_tokens, draft_length or 0,
                          settings.threads, settings.n_ctx, method.env, spec_type=spec_type)
    return result.as_result("n-gram" if draft is None else model_set.levels[method.levels[1]].role,
                            draft_length) | {"command": result.command}


def _sweep(model_set, methods: list[Method], prepared: list[dict], settings: SetSettings, bin_dir: Path,
           progress: Steps) -> list[dict]:
    """llama-speculative-simple with each draft at each length on the first prompts; every row kept."""
    rows = []
    for method in methods:
        draft = model_set.levels[method.levels[1]].path
        for length in settings.sweep_lengths:
            tokens = seconds = drafted = accepted = 0
            commands = []
            for prompt in prepared:
                progress.step(f"sweep {method.key} n={length}")
                result = llamacpp.run(bin_dir, model_set.target.path, draft, prompt["text"], settings.max_tokens,
                                      length, settings.threads, settings.n_ctx, method.env)
                tokens, seconds = tokens + result.new_tokens, seconds + result.seconds
                drafted, accepted = drafted + result.drafted, accepted + result.accepted
                commands.append(result.command)
            rows.append({"method": method.key, "draft": model_set.levels[method.levels[1]].role,
                         "draft_length": length, "prompts": len(prepared), "tokens": tokens, "seconds": seconds,
                         "tokens_per_second": tokens / seconds if seconds else 0.0,
                         "acceptance": accepted / drafted if drafted else 0.0, "command": commands[0]})
    return rows


def _by_method(rows: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["method"], []).append(row)
    return grouped


def _record(prompt: str, reply: dict) -> dict:
    seconds, prompt_seconds = reply["seconds"], reply.get("prompt_seconds")
    after = seconds - prompt_seconds if prompt_seconds is not None else 0.0
    record = {
        "prompt": prompt,
        "seconds": seconds,
        "prompt_seconds": prompt_seconds,
        "new_tokens": reply["new_tokens"],
        "prompt_tokens": reply["prompt_tokens"],
        "tokens_per_second": reply["new_tokens"] / seconds if seconds > 0 else 0.0,
        "after_prompt_tokens_per_second": reply["new_tokens"] / after if after > 0 else None,
        "stop_reason": reply.get("stop_reason"),
        "levels": reply.get("levels", []),
        "shapes": reply.get("shapes", {}),
        "text": reply.get("text"),
    }
    for key in ("tokens", "command", "draft_length"):
        if reply.get(key) is not None:
            record[key] = reply[key]
    return record


def _check_identity(runs: dict[str, list[dict]]) -> None:
    """Mark each answer identical or not to the target alone's; llama-bench's runs have no answer (None)."""
    for key, records in runs.items():
        for record, reference in zip(records, runs[TARGET], strict=True):
            if record["text"] is None:
                record["identical"] = None
            elif "tokens" in record:
                record["identical"] = record["tokens"] == reference["tokens"]
            elif reference["stop_reason"] == "max_tokens":  # llama.cpp may overshoot by part of a draft
                record["identical"] = record["text"].startswith(reference["text"])
            else:
                record["identical"] = record["text"] == reference["text"]
