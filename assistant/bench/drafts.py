"""`bench --drafts SET`: the table of "Draft Model Generation for Speculative Decoding" on this machine, for one
model set's target: every compressed candidate (the set's own drafts, casts to fewer bits, blocks dropped by the
greedy search, on the target and on its MXFP4 copy) with its size, agreement with the target's own text, cost
per token and the predicted speedup of target <- it; then target <- the best predicted candidate against the
target alone, measured over whole requests (alternating, greedy, the answers must be the target's)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

REPEATS = 3


def run(model_set, cache: Path, threads: int, steps: int = 3, say=print) -> dict:
    from assistant.drafts.candidates import chain_with, measured_candidates

    target = Path(model_set.levels[0].path)
    references, rows = measured_candidates(model_set, cache / "drafts" / model_set.name, steps, threads, say=say)
    best = max(rows[1:], key=lambda row: row["predicted_speedup"])
    say(f"[bench] target <- {best['method']} {best['setting']} against the target alone, whole requests")
    measured = _chain_speedup([target, Path(best["path"])], [target], references, threads)
    default = [Path(level.path) for level in model_set.levels]
    with_it = measured
    if len(default) > 1 and best["level"] is None:
        chain = chain_with(model_set, Path(best["path"]), rows)
        say(f"[bench] the default chain with it ({', '.join(path.name for path in chain)}) against the default chain")
        with_it = _chain_speedup(chain, default, references, threads, ngram=True)
    return {"model_set": model_set.name, "target": str(target), "threads": threads, "steps": steps,
            "reference_tokens": sum(len(r.answer) for r in references), "rows": rows, "best": best,
            "measured": measured, "default_chain": with_it}


def _chain_speedup(chain: list[Path], baseline: list[Path], references, threads: int, ngram: bool = False) -> dict:
    """Tokens/s of the chain of GGUF files ``chain`` over ``baseline``'s on the reference prompts, medians of
    REPEATS runs each, alternating; ``ngram``: both get the n-gram level, as a model set of several files does."""
    from assistant.speculative import Pipeline, Sampling

    pipelines = {"chain": Pipeline.load(chain, threads=threads, ngram=ngram),
                 "target": Pipeline.load(baseline, threads=threads, ngram=ngram)}
    try:
        ratios, differing = [], 0
        for index, reference in enumerate(references):
            seconds = {name: [] for name in pipelines}
            answers = {}
            for repeat in range(REPEATS):
                for name in (list(pipelines) if (index + repeat) % 2 == 0 else list(pipelines)[::-1]):
                    began = time.perf_counter()
                    answers[name] = pipelines[name].generate(reference.prompt, Sampling(),
                                                             len(reference.answer)).finish().tokens
                    seconds[name].append(time.perf_counter() - began)
            differing += answers["chain"] != answers["target"]
            ratios.append(statistics.median(seconds["target"]) / statistics.median(seconds["chain"]))
    finally:
        for pipeline in pipelines.values():
            pipeline.close()
    return {"speedups": ratios, "geomean": statistics.geometric_mean(ratios), "answers_differing": differing}


def markdown(result: dict, machine: dict) -> str:
    lines = [f"# `assistant bench --drafts {result['model_set']}`", "",
             f"CPU: {machine['cpu']} ({machine['kernels']}), {result['threads']} threads. Reference: the target's own "
             f"greedy answers to 4 neutral coding requests ({result['reference_tokens']} tokens), teacher-forced.", "",
             "| draft | setting | file MB | agreement | ms / token | cost x target | predicted speedup (length) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in result["rows"]:
        lines.append(f"| {row['method']} | {row['setting'] or '-'} | {row['size'] / 1e6:.0f} | {row['agreement']:.3f} | "
                     f"{row['seconds_per_token'] * 1e3:.2f} | {row['cost_vs_target']:.2f} | "
                     f"{row['predicted_speedup']:.2f}x ({row['predicted_length']}) |")
    best, measured = result["best"], result["measured"]
    lines += ["", f"Best predicted: {best['method']} {best['setting']}. Measured, target <- it over the target alone "
              f"(whole requests, medians of {REPEATS}, alternating): {measured['geomean']:.3f}x (per prompt "
              + ", ".join(f"{r:.2f}x" for r in measured["speedups"]) + f"); {measured['answers_differing']} answers "
              "differing from the target alone."]
    default = result["default_chain"]
    lines += ["", f"The set's default chain with it, over the default chain without it: {default['geomean']:.3f}x (per "
              "prompt " + ", ".join(f"{r:.2f}x" for r in default["speedups"]) + f"); {default['answers_differing']} "
              "answers differing."]
    return "\n".join(lines) + "\n"
