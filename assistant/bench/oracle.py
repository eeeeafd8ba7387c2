"""The least time any chain of a pipeline's levels could take, knowing in advance where each draft is right.

ceiling.py credits every draft with perfect acceptance. This bound takes the drafts as they are. For each
answer of the target alone it knows, per level below the target, how many tokens from each position on
that level would propose exactly (teacher-forced: its greedy choice after the prompt and the answer so
far; for the n-gram level, how far its proposal matches), and it has each model level's measured cost of
evaluating 1..16 new tokens. By dynamic programming it finds the cheapest sequence of rounds (which level
drafts for which, how many tokens) that produces the answer. It never proposes a token that fails, drafts
without catching a cache up and coordinates for free, so no policy over these levels can beat it: what
lies between it and a goal needs better drafts or faster evaluation, not a better policy.

The same bound for each shape (the target and a subset of the levels below it) says where that foresight
pays: where one shape's bound is close to the chain's, knowing *which* shape to run matters little, and what
is left is knowing where each draft fails, which only hindsight has.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from itertools import combinations

from assistant.bench.ceiling import against
from assistant.bench.pipelines import BASELINE


def agreement_runs(agree: list[bool]) -> list[int]:
    """runs[i]: how many consecutive positions from i on are True."""
    runs = [0] * (len(agree) + 1)
    for index in range(len(agree) - 1, -1, -1):
        runs[index] = runs[index + 1] + 1 if agree[index] else 0
    return runs[:-1]


def least_seconds(runs: list[list[int] | None], costs: list[dict[int, float] | None], n: int) -> float:
    """The cheapest way for level 0 (the target) to produce n tokens. ``runs[j][p]``: tokens from position p
    on that level j proposes right (runs[0] is not used); ``costs[j]``: {batch: seconds} for a model level,
    None for the n-gram level, whose proposals cost nothing."""
    # Never cheaper to evaluate more tokens (measured costs are noisy): so proposing a token that fails
    # never pays, and a level proposes exactly the tokens it has right, or fewer.
    envelope = [None if cost is None else {b: min(s for size, s in cost.items() if size >= b) for b in cost}
                for cost in costs]
    levels = len(costs)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * n + 1000))

    @lru_cache(maxsize=None)
    def produce(level: int, start: int, end: int) -> float:
        """Least time for ``level`` to produce the answer's tokens [start, end), which it has right."""
        if start >= end:
            return 0.0
        cost = envelope[level]
        longest = max(cost) - 1  # drafted tokens in its largest measured batch
        best = cost[1] + produce(level, start + 1, end)
        for drafter in range(level + 1, levels):
            right = min(runs[drafter][start], longest)
            for k in range(1, right + 1):
                drafting = 0.0 if envelope[drafter] is None else produce(drafter, start, start + k)
                best = min(best, drafting + cost[k + 1] + produce(level, min(start + k + 1, end), end))
        return best

    return produce(0, 0, n)


def oracle(runs: dict[str, list[dict]], verify_seconds: dict | None, inputs: dict | None,
           light: float | None = None) -> dict | None:
    """The bound for ``inputs['pipeline']`` against (i), llama.cpp's best and the speed of light ``light``."""
    baseline = runs.get(BASELINE)
    if not inputs or not verify_seconds or not baseline or any(r.get("prompt_seconds") is None for r in baseline):
        return None
    costs = [{int(n): s for n, s in level.items()} if level is not None else None for level in inputs["costs"]]
    costs[0] = {int(n): s for n, s in verify_seconds.items()}
    lengths = [min([r["new_tokens"], *map(len, prompt_runs[1:])]) for prompt_runs, r in zip(inputs["runs"], baseline)]
    decode = [least_seconds(prompt_runs, costs, n) for prompt_runs, n in zip(inputs["runs"], lengths)]
    roles = inputs["roles"]
    shapes = {}
    for size in range(1, len(roles) - 1):  # the whole chain is ``decode`` itself
        for below in combinations(range(1, len(roles)), size):
            shape = (0, *below)
            shapes["<-".join(roles[level] for level in shape)] = sum(
                least_seconds([prompt_runs[level] for level in shape], [costs[level] for level in shape], n)
                for prompt_runs, n in zip(inputs["runs"], lengths))
    policy = runs.get(inputs["pipeline"], [])
    return {
        "pipeline": inputs["pipeline"],
        "roles": roles,
        "decode_seconds": sum(decode),
        "shape_decode_seconds": shapes,
        "policy_decode_seconds": sum(r["seconds"] - r["prompt_seconds"] for r in policy) if policy else None,
        "policy_seconds": sum(r["seconds"] for r in policy) if policy else None,
        "prompt_seconds": sum(r["prompt_seconds"] for r in baseline),
    } | against(runs, decode, light)


def policy_share(bound: dict, decode_seconds: float) -> float | None:
    """The policy's speed as a share of a bound that decodes the run's answers in ``decode_seconds``, over the
    whole run: the bound's time (the target alone's prompts plus that decoding) over the policy's."""
    if not bound.get("policy_seconds"):
        return None
    return (bound["prompt_seconds"] + decode_seconds) / bound["policy_seconds"]
