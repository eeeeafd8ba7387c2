"""Two ways of answering the same prompts, timed against each other: `bench --serving` (in process vs through
the server) and `bench --attached` (with vs without the n-gram level).

Each prompt is answered ``repeats`` times by each way, alternating which goes first, and the medians are
compared: a toy model's answer takes a fraction of a second and one run is noise. The answers must be the
same (greedy), or the comparison would mean nothing."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

from assistant.errors import AssistantError

REPEATS = 3


@dataclass(frozen=True)
class Run:
    seconds: float  # from the request to the last token, prompt included
    text: str
    tokens: int
    ids: tuple | None = None  # the token ids, where the way shows them (a server's stream does not)
    stats: object = None  # the pipeline's Stats, or what the server reported of them

    def same_answer(self, other: "Run") -> bool:
        if self.ids is not None and other.ids is not None:
            return self.ids == other.ids
        return (self.text, self.tokens) == (other.text, other.tokens)


def answer_in_process(pipeline, messages: list[dict], max_tokens: int) -> Run:
    """One greedy answer from ``pipeline``, timed around the whole generation."""
    from assistant.speculative import Sampling

    began = time.perf_counter()
    answer = pipeline.chat(messages, Sampling(), max_tokens).finish()
    return Run(time.perf_counter() - began, answer.text, len(answer.tokens), tuple(answer.tokens), answer.stats)


def alternate(prompts: list[dict], ways: dict[str, Callable[[list[dict]], Run]], repeats: int = REPEATS,
              warm: bool = True):
    """For each prompt: {way: [Run per repeat]}; both ways warmed on the first prompt first (unless ``warm`` is
    False: the caller warmed them)."""
    (first, one), (second, other) = ways.items()
    if warm:
        one(prompts[0]["messages"]), other(prompts[0]["messages"])
    for index, prompt in enumerate(prompts):
        runs = {first: [], second: []}
        for repeat in range(repeats):
            order = (first, second) if (index + repeat) % 2 == 0 else (second, first)
            for name in order:
                runs[name].append(ways[name](prompt["messages"]))
        if not all(a.same_answer(b) for a, b in zip(runs[first], runs[second])):
            raise AssistantError(f"prompt {prompt['id']}: the answers of {first} and {second} differ")
        yield prompt, runs


def tokens_per_second(runs: list[Run]) -> float:
    """From the median time of the runs (their answers are the same)."""
    return runs[0].tokens / statistics.median(run.seconds for run in runs)
