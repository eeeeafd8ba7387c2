"""The most any speculative pipeline could gain on this machine with these kernels.

Every pipeline has the target evaluate the prompt and then verify every token it answers with. Give it the
best drafts there can be, every drafted token accepted and drafting free, and a token still costs the target
at least the cheapest verification per token, min over n of T(n) / n, where T(n) is the measured time for
the target to evaluate n new tokens after the prompt (n up to the policy's longest batch). On each prompt
the ceiling is then (the target's measured prompt time) + new tokens x that cost. A goal above the ceiling
cannot be met by a better policy or better drafts, only by faster verification or a faster prompt.
"""

from __future__ import annotations

import statistics

from assistant.bench.pipelines import BASELINE, LLAMA_CPP
from assistant.bench.summary import geomean


def ceiling(runs: dict[str, list[dict]], verify_seconds: dict, light: float | None = None) -> dict | None:
    """The ceiling against (i) the target alone, llama.cpp's best and the speed of light ``light`` (tokens/s),
    from the target alone's runs and its verification times ``verify_seconds`` ({n: seconds})."""
    baseline = runs.get(BASELINE)
    if not verify_seconds or not baseline or any(r.get("prompt_seconds") is None for r in baseline):
        return None
    per_token = {int(n): seconds / int(n) for n, seconds in verify_seconds.items()}
    best = min(per_token, key=per_token.get)
    decode = [r["new_tokens"] * per_token[best] for r in baseline]
    return {"verify_seconds_per_token": per_token[best], "verify_batch": best} | against(runs, decode, light)


def against(runs: dict[str, list[dict]], decode_seconds: list[float], light: float | None) -> dict:
    """A bound that decodes prompt i's answer in ``decode_seconds[i]`` after the target alone's prompt time,
    against (i) and llama.cpp's best (geomeans of per-prompt ratios) and the speed of light (median rate)."""
    baseline = runs[BASELINE]
    rates = [r["new_tokens"] / (r["prompt_seconds"] + s) for r, s in zip(baseline, decode_seconds)]
    median_rate = statistics.median(rates)
    result = {
        "speedup_geomean": geomean([rate / r["tokens_per_second"] for rate, r in zip(rates, baseline)]),
        "tokens_per_second_median": median_rate,
        "speed_of_light": median_rate / light if light else None,
    }
    theirs = runs.get(LLAMA_CPP)
    if theirs:
        result["over_llama_cpp_geomean"] = geomean([rate / r["tokens_per_second"] for rate, r in zip(rates, theirs)])
    return result
