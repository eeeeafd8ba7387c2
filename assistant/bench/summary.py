"""Per-pipeline figures from one workload's runs, as BENCHMARK.md asks for them.

Speedup on a prompt is the pipeline's tokens/s over the target's tokens/s on the same prompt (for a fixed
token budget that is the ratio of times; it also stays fair when llama.cpp overshoots the budget by part of
a draft). Beside the geomean goes a bootstrap interval over the prompts: an adaptive pipeline run twice in one
interleaved run differs by up to 20% on a prompt (its exploration follows measured timings), so a geomean
over 4 prompts moves by ~0.1x from run to run, and the interval says how far. Per level: alpha = accepted /
proposed over all prompts, tau = mean accepted length averaged over prompts, and the share of generation
time spent decoding in that level's context.

Every pipeline evaluates the prompt with the target before it drafts anything, at the same cost, and on a
CPU that is compute-bound work speculation cannot shorten: "after the prompt" is the same ratio of the rates
at which each pipeline generates once the prompt is in (new tokens / (seconds - prompt seconds)), beside the
prompt's share of the pipeline's time. Both are None where a run did not time its prompt.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from assistant.bench.pipelines import BASELINE, PLAIN


def geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else 0.0


def geomean_interval(values: list[float], level: float = 0.95, resamples: int = 2000) -> tuple[float, float]:
    """Bootstrap percentile interval of the geomean: prompts drawn again with replacement (fixed seed, so a
    report reproduces); a single prompt gives no spread."""
    logs = np.log([v for v in values if v > 0])
    if logs.size < 2:
        return (geomean(values),) * 2
    draws = np.random.default_rng(0).integers(0, logs.size, (resamples, logs.size))
    low, high = np.quantile(logs[draws].mean(axis=1), [(1 - level) / 2, (1 + level) / 2])
    return float(np.exp(low)), float(np.exp(high))


def summarize(runs: dict[str, list[dict]]) -> dict[str, dict]:
    baseline = runs[BASELINE]
    baseline_rates = [_generation_rate(record) for record in baseline]
    plain = runs.get(PLAIN)
    summary = {}
    for key, records in runs.items():
        speedups = [r["tokens_per_second"] / b["tokens_per_second"] if b["tokens_per_second"] else 0.0
                    for r, b in zip(records, baseline)]
        over_plain = [r["tokens_per_second"] / b["tokens_per_second"] if b["tokens_per_second"] else 0.0
                      for r, b in zip(records, plain)] if plain else []
        for record, speedup in zip(records, speedups):
            record["speedup"] = speedup
        rates = [_generation_rate(record) for record in records]
        after_prompt = [rate / base for rate, base in zip(rates, baseline_rates) if rate and base]
        timed = all(r.get("prompt_seconds") is not None for r in records)
        total_seconds = sum(r["seconds"] for r in records)
        summary[key] = {
            "prompts": len(records),
            "speedup_geomean": geomean(speedups),
            "speedup_interval": geomean_interval(speedups),
            "speedup_over_plain_geomean": geomean(over_plain) if plain else None,
            "speedup_min": min(speedups),
            "speedup_median": statistics.median(speedups),
            "speedup_max": max(speedups),
            "speedup_after_prompt_geomean": geomean(after_prompt) if after_prompt else None,
            "prompt_share": (sum(r["prompt_seconds"] for r in records) / total_seconds
                             if timed and total_seconds else None),
            "tokens_per_second_median": statistics.median(r["tokens_per_second"] for r in records),
            "tokens": sum(r["new_tokens"] for r in records),
            "seconds": total_seconds,
            "differing_prompts": sum(not r.get("identical", True) for r in records),
            "levels": _levels(records, total_seconds),
            "shapes": _shapes(records),
        }
    return summary


def _generation_rate(record: dict) -> float | None:
    """New tokens per second once the prompt was in; None where the prompt was not timed."""
    if record.get("prompt_seconds") is None:
        return None
    after = record["seconds"] - record["prompt_seconds"]
    return record["new_tokens"] / after if after > 0 else None


def _shapes(records: list[dict]) -> dict:
    """Target rounds per chain shape over all prompts, most used first, and the rounds outside the shape
    each prompt used most (what the policy spent measuring or settling)."""
    rounds: dict[str, int] = {}
    elsewhere = 0
    for record in records:
        shapes = record.get("shapes") or {}
        for shape, count in shapes.items():
            rounds[shape] = rounds.get(shape, 0) + count
        elsewhere += sum(shapes.values()) - max(shapes.values(), default=0)
    return {"rounds": dict(sorted(rounds.items(), key=lambda item: -item[1])), "outside_main": elsewhere}


def _levels(records: list[dict], total_seconds: float) -> list[dict]:
    count = len(records[0]["levels"])
    levels = []
    for index in range(count):
        rows = [r["levels"][index] for r in records]
        proposed = sum(row["proposed"] for row in rows)
        accepted = sum(row["accepted"] for row in rows)
        seconds = sum(row["seconds"] for row in rows)
        taus = [row["mean_accepted_length"] for row in rows if row["mean_accepted_length"]]
        levels.append({
            "role": rows[0]["role"],
            "proposed": proposed,
            "accepted": accepted,
            "acceptance": accepted / proposed if proposed else None,
            "mean_accepted_length": statistics.mean(taus) if taus else None,
            "seconds": seconds,
            "time_share": seconds / total_seconds if total_seconds and seconds else None,
        })
    return levels


def per_prompt_acceptance(records: list[dict], level: int) -> list[float]:
    """Acceptance ratio of one draft level on each prompt (the paper's Figures 5-6 histogram these)."""
    return [r["levels"][level]["acceptance"] for r in records
            if len(r["levels"]) > level and r["levels"][level]["proposed"]]
