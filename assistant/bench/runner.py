"""The interleaved run: every pipeline on prompt 1, then every pipeline on prompt 2, ...

Interleaving makes machine noise (other processes, thermal drift) hit all pipelines alike, so per-prompt
ratios are fair even on a busy machine. The order of pipelines rotates from prompt to prompt so no one
pipeline always runs first after llama.cpp's program has flushed the caches. Each pipeline is warmed up
once; every run then starts from empty caches, as llama.cpp's program does. llama.cpp's program gets a
small sweep of draft model and draft length first, and its best setting is what runs interleaved.

The levels' batch costs (for the ceiling and the oracle) are sampled the same way, once after each prompt's
runs, and their median taken: a VM's memory bandwidth can change for a minute at a time, so costs measured in
one stretch at the end may belong to another machine than the runs they bound.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from assistant.bench import llamacpp
from native import build
from assistant.bench.pipelines import BASELINE, LLAMA_CPP, PipelineSpec
from converters.progress import Steps
from assistant.speculative.policy import MAX_DRAFT
from assistant.errors import AssistantError

WARMUP_TOKENS = 16
VERIFY_SIZES = MAX_DRAFT + 1  # the target's batch costs are measured for 1..this many tokens
VERIFY_REPS = 3  # samples of each batch cost at least, spread over the prompts


@dataclass
class Settings:
    pipelines: list[PipelineSpec]
    max_tokens: int = 128
    threads: int = 2
    n_ctx: int = 4096
    llama_cpp: bool = True
    sweep_lengths: tuple[int, ...] = (2, 4, 8)
    sweep_drafts: tuple[str, ...] = ("draft", "draft-mxfp4", "mxfp4")
    sweep_prompts: int = 2
    log_dir: Path | None = None
    show_progress: bool | None = None
    extra: dict = field(default_factory=dict)


class WorkerProcess:
    """One ``assistant.bench.worker`` process; calls are synchronous, one request at a time."""

    def __init__(self, kernel: str, env: dict[str, str], log_path: Path):
        environment = dict(os.environ, **env)
        environment["PYTHONUNBUFFERED"] = "1"
        self.kernel, self.log_path = kernel, log_path
        self._log = open(log_path, "ab")
        self.process = subprocess.Popen([sys.executable, "-m", "assistant.bench.worker"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._log, env=environment,
                                        cwd=Path(__file__).resolve().parents[2])

    def call(self, op: str, **request) -> dict:
        try:
            self.process.stdin.write((json.dumps({"op": op, **request}) + "\n").encode())
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except BrokenPipeError:
            line = b""
        if not line:
            raise AssistantError(f"the bench worker ({self.kernel} kernels) stopped; its log is {self.log_path}")
        reply = json.loads(line)
        if "error" in reply:
            raise AssistantError(f"bench worker ({self.kernel} kernels), {op}: {reply['error']}")
        return reply

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def run_workload(workload, prompts: list[dict], settings: Settings) -> dict:
    """Run every selected pipeline on every prompt of one workload; returns the raw record."""
    import tempfile

    log_dir = settings.log_dir or Path(tempfile.mkdtemp(prefix="assistant-bench-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    paths = workload.paths()
    specs = settings.pipelines
    sweep_runs = (len(settings.sweep_drafts) * len(settings.sweep_lengths) * min(settings.sweep_prompts, len(prompts))
                  if settings.llama_cpp else 0)
    chain = _oracle_pipeline(specs) if any(spec.key == BASELINE for spec in specs) else None
    steps = (len(specs) + sweep_runs + len(prompts) * (len(specs) + int(settings.llama_cpp))
             + len(prompts) * int(any(spec.key == BASELINE for spec in specs)) + (len(prompts) if chain else 0))
    progress = Steps(f"bench {workload.key}", steps, settings.show_progress)
    began = time.perf_counter()
    workers: dict[str, WorkerProcess] = {}
    try:
        for kernel in dict.fromkeys(spec.kernel for spec in specs):
            members = [spec for spec in specs if spec.kernel == kernel]
            worker = WorkerProcess(kernel, members[0].env, log_dir / f"worker-{workload.key}-{kernel}.log")
            workers[kernel] = worker
            worker.call("load", n_ctx=settings.n_ctx, threads=settings.threads, pipelines={
                spec.key: {"paths": [str(paths[role]) for role in spec.roles], "roles": list(spec.roles),
                           "draft_length": spec.draft_length, "confidence": spec.confidence, "ngram": spec.ngram}
                for spec in members})
        home = workers[specs[0].kernel]
        prompt_texts = [home.call("prompt_text", pipeline=specs[0].key, messages=p["messages"])["text"] for p in prompts]

        for spec in specs:  # warm-up: first touch of weights, thread pools, buffers
            progress.step(f"warm-up {spec.key}")
            workers[spec.kernel].call("run", pipeline=spec.key, messages=prompts[0]["messages"], max_tokens=WARMUP_TOKENS)

        sweep, best = [], None
        if settings.llama_cpp:
            bin_dir = build.tools_dir()
            sweep = _sweep(bin_dir, workload, prompt_texts, settings, progress)
            best = max(sweep, key=lambda row: row["tokens_per_second"])

        runs: dict[str, list[dict]] = {spec.key: [] for spec in specs}
        if best:
            runs[LLAMA_CPP] = []
        baseline = next((spec for spec in specs if spec.key == BASELINE), None)
        samples: list[list[dict | None]] = []  # per prompt, each model level's batch costs (the target's first)
        for index, prompt in enumerate(prompts):
            order = specs[index % len(specs):] + specs[: index % len(specs)]
            for spec in order:
                progress.step(f"{prompt.get('id', index)} {spec.key}")
                reply = workers[spec.kernel].call("run", pipeline=spec.key, messages=prompt["messages"],
                                                  max_tokens=settings.max_tokens)
                runs[spec.key].append(_record(prompt, index, reply))
            if best:
                progress.step(f"{prompt.get('id', index)} {LLAMA_CPP}")
                result = llamacpp.run(bin_dir, paths["target"], paths[best["draft"]], prompt_texts[index],
                                      settings.max_tokens, best["draft_length"], settings.threads, settings.n_ctx)
                runs[LLAMA_CPP].append(_record(prompt, index, result.as_result(best["draft"], best["draft_length"])))
            if baseline is not None:  # for the ceiling of speculation on these kernels (ceiling.py) and the oracle
                progress.step(f"{prompt.get('id', index)} batch costs")
                samples.append(_batch_costs(workers, baseline, chain, prompt, -(-VERIFY_REPS // len(prompts))))
        costs = [_median_costs(level) for level in zip(*samples)] if samples else []
        verify_costs = costs[0] if costs else None
        oracle_inputs = None
        if chain is not None:
            oracle_inputs = _oracle_inputs(workers[chain.kernel], chain, prompts, runs[BASELINE], costs, progress)
    finally:
        for worker in workers.values():
            worker.close()
        progress.finish()
    _check_identity(runs)
    return {
        "workload": workload.describe(),
        "prompts": [prompt.get("id", str(index)) for index, prompt in enumerate(prompts)],
        "llama_cpp_sweep": sweep,
        "llama_cpp_best": best,
        "runs": runs,
        "verify_costs": verify_costs,
        "cost_samples": len(samples),
        "oracle_inputs": oracle_inputs,
        "seconds": time.perf_counter() - began,
    }


def _oracle_pipeline(specs: list[PipelineSpec]) -> PipelineSpec | None:
    """The pipeline whose levels the oracle (oracle.py) combines: of ours, the one with the most levels."""
    chains = [spec for spec in specs if spec.kernel == "ours" and len(spec.roles) > 1]
    return max(chains, key=lambda spec: len(spec.roles) + spec.ngram, default=None)


def _batch_costs(workers: dict[str, WorkerProcess], baseline: PipelineSpec, chain: PipelineSpec | None,
                 prompt: dict, reps: int) -> list[dict | None]:
    """One sample of each model level's {batch size: seconds}, after ``prompt``: the target alone's first, then
    each level of ``chain`` below its target (None for the n-gram level, whose proposals cost nothing)."""
    sizes = list(range(1, VERIFY_SIZES + 1))
    sample = [workers[baseline.kernel].call("verify_costs", pipeline=BASELINE, messages=prompt["messages"],
                                            sizes=sizes, reps=reps)["seconds"]]
    if chain is not None:
        sample += [workers[chain.kernel].call("verify_costs", pipeline=chain.key, messages=prompt["messages"],
                                              sizes=sizes, reps=reps, level=level)["seconds"]
                   for level in range(1, len(chain.roles))]
        sample += [None] * chain.ngram
    return sample


def _median_costs(samples: tuple[dict | None, ...]) -> dict | None:
    """{batch size: median seconds} over one level's samples."""
    if samples[0] is None:
        return None
    return {size: statistics.median(sample[size] for sample in samples) for size in samples[0]}


def _oracle_inputs(worker: WorkerProcess, chain: PipelineSpec, prompts: list[dict], answers: list[dict],
                   costs: list[dict | None], progress: Steps) -> dict:
    """What the oracle needs: where each of the chain's drafts agrees with each answer of the target alone,
    and what a batch costs each of its model levels (``costs``, sampled over the run; the target's own costs are
    verify_costs)."""
    runs = []
    for prompt, answer in zip(prompts, answers):
        progress.step(f"{prompt.get('id', '')} drafts' agreement with the target")
        reply = worker.call("agreement", pipeline=chain.key, messages=prompt["messages"], answer=answer["tokens"],
                            longest=VERIFY_SIZES - 1)
        runs.append([None] + reply["runs"])
    return {"pipeline": chain.key, "roles": reply["roles"], "runs": runs, "costs": [None, *costs[1:]]}


def _record(prompt: dict, index: int, reply: dict) -> dict:
    seconds = reply["seconds"]
    record = {
        "prompt": prompt.get("id", str(index)),
        "seconds": seconds,
        "prompt_seconds": reply.get("prompt_seconds"),
        "new_tokens": reply["new_tokens"],
        "prompt_tokens": reply["prompt_tokens"],
        "tokens_per_second": reply["new_tokens"] / seconds if seconds > 0 else 0.0,
        "stop_reason": reply.get("stop_reason"),
        "levels": reply["levels"],
        "shapes": reply.get("shapes", {}),
        "text": reply["text"],
    }
    if "tokens" in reply:
        record["tokens"] = reply["tokens"]
    return record


def _sweep(bin_dir: Path, workload, prompt_texts: list[str], settings: Settings, progress: Steps) -> list[dict]:
    """llama.cpp's program with each draft model and draft length on the first prompts; all rows kept."""
    rows = []
    texts = prompt_texts[: settings.sweep_prompts]
    paths = workload.paths()
    for draft in settings.sweep_drafts:
        for length in settings.sweep_lengths:
            tokens = seconds = drafted = accepted = 0
            for text in texts:
                progress.step(f"sweep llama.cpp {draft} n={length}")
                run = llamacpp.run(bin_dir, paths["target"], paths[draft], text, settings.max_tokens, length,
                                   settings.threads, settings.n_ctx)
                tokens += run.new_tokens
                seconds += run.seconds
                drafted += run.drafted
                accepted += run.accepted
            rows.append({"draft": draft, "draft_length": length, "prompts": len(texts), "tokens": tokens,
                         "seconds": seconds, "tokens_per_second": tokens / seconds if seconds else 0.0,
                         "acceptance": accepted / drafted if drafted else 0.0})
    return rows


def _check_identity(runs: dict[str, list[dict]]) -> None:
    """Mark each run identical or not to the target's own greedy output on the same prompt."""
    baseline = runs[BASELINE]
    for key, records in runs.items():
        for record, reference in zip(records, baseline, strict=True):
            if key == BASELINE:
                record["identical"] = True
            elif "tokens" in record:
                record["identical"] = record["tokens"] == reference["tokens"]
            elif reference["stop_reason"] == "max_tokens":
                # llama.cpp may overshoot by part of a draft; it must start with the target's text
                record["identical"] = record["text"].startswith(reference["text"])
            else:
                record["identical"] = record["text"] == reference["text"]
            if not record["identical"]:
                record["first_difference"] = _first_difference(record, reference)


def _first_difference(record: dict, reference: dict) -> int:
    """Index of the first differing token (or character, for llama.cpp's text)."""
    a, b = (record["tokens"], reference["tokens"]) if "tokens" in record else (record["text"], reference["text"])
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return min(len(a), len(b))
