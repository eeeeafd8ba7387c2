"""How well a candidate draft tracks its target, and what it costs here.

The reference is text the target writes itself (its greedy answers to a few neutral coding requests): no data
set is needed, and it is exactly what a draft must predict. A candidate reads each prompt and answer in one
batch (teacher forcing) and its argmax at each answer position is compared with the target's token there; its
cost is the time of decoding one token at a time after a prompt, as a draft does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Coding requests of the kinds the bench asks, none about one library: what the target writes to them is what
# its drafts must predict.
NEUTRAL_PROMPTS = (
    "Write a Python function that merges two sorted lists into one sorted list, with a docstring.",
    "Explain what a race condition is, with a short example in Python.",
    "Write a class for a stack with push, pop and peek, and a few tests for it.",
    "How do I read a CSV file and sum one of its columns in Python?",
)
TIMED_TOKENS = 16  # single-token decodes timed per run
TIMED_RUNS = 3
MAX_LENGTH = 8  # the longest draft a prediction considers


@dataclass(frozen=True)
class Reference:
    prompt: list[int]
    answer: list[int]


@dataclass(frozen=True)
class Measured:
    path: Path
    size: int  # bytes of the file
    agreement: float  # share of answer positions where the candidate's argmax is the target's token
    seconds_per_token: float  # decoding one token at a time after a prompt
    batch_seconds: tuple[float, ...] = ()  # where asked: evaluating a batch of 1, 2, ... MAX_LENGTH + 1 tokens


def self_written(target: Path, tokens: int = 160, threads: int | None = None) -> list[Reference]:
    """The target's own greedy answers to NEUTRAL_PROMPTS, ``tokens`` each at most (through its chat template, or
    as plain text for a file that stores none)."""
    from assistant.engine.chat_template import chat_prompt_tokens
    from assistant.speculative import Pipeline, Sampling

    references = []
    with Pipeline.load([target], levels=1, threads=threads, ngram=False) as pipeline:
        for prompt in NEUTRAL_PROMPTS:
            ids = (chat_prompt_tokens(pipeline.target, [{"role": "user", "content": prompt}])
                   if pipeline.target.chat_template else pipeline.tokenize(prompt + "\n"))  # no template: as text
            answer = pipeline.generate(ids, Sampling(), tokens).finish()
            references.append(Reference(ids, list(answer.tokens)))
    return references


def measure(path: Path, references: list[Reference], n_vocab: int, threads: int | None = None,
            batches: bool = False) -> Measured:
    """``path``'s agreement with the references over the first ``n_vocab`` ids (the shared vocabulary), and its
    cost per decoded token; with ``batches`` (the target's), also what verifying a draft of each length costs."""
    from assistant.engine import Context, Model, default_threads
    from assistant.engine.sequence import TokenSequence

    longest = max(len(r.prompt) + len(r.answer) for r in references)
    with Model(path) as model:
        context = Context(model, n_ctx=longest + TIMED_TOKENS + 8, threads=threads or default_threads())
        try:
            agreed = total = 0
            for reference in references:
                if not reference.answer:
                    continue
                rows = context.evaluate(TokenSequence(reference.prompt + reference.answer), len(reference.prompt) - 1)
                choices = rows[: len(reference.answer), :n_vocab].argmax(axis=1)
                agreed += int(np.count_nonzero(choices == np.asarray(reference.answer)))
                total += len(reference.answer)
            seconds = _decoding_seconds(context, references[0], TokenSequence)
            batch_seconds = _batch_seconds(context, references[0], TokenSequence) if batches else ()
        finally:
            context.close()
    return Measured(Path(path), Path(path).stat().st_size, agreed / total if total else 0.0, seconds, batch_seconds)


def _decoding_seconds(context, reference: Reference, sequence_type) -> float:
    """Seconds per token of one-at-a-time decoding after the first reference's prompt (the prompt untimed): the
    least of TIMED_RUNS runs, as a VM's other tenants only ever add time."""
    following = (reference.answer * TIMED_TOKENS)[:TIMED_TOKENS] or [0] * TIMED_TOKENS
    runs = []
    for _ in range(TIMED_RUNS):
        tokens = list(reference.prompt)
        context.evaluate(sequence_type(tokens), len(tokens) - 1)
        began = time.perf_counter()
        for token in following:
            tokens.append(token)
            context.evaluate(sequence_type(tokens), len(tokens) - 1)
        runs.append((time.perf_counter() - began) / TIMED_TOKENS)
    return min(runs)


def _batch_seconds(context, reference: Reference, sequence_type) -> tuple[float, ...]:
    """Seconds to evaluate a batch of 1 .. MAX_LENGTH + 1 tokens after the first reference's prompt (a
    verification of a draft of 0 .. MAX_LENGTH tokens), the least of TIMED_RUNS runs each."""
    following = (reference.answer * (MAX_LENGTH + 1))[: MAX_LENGTH + 1] or [0] * (MAX_LENGTH + 1)
    costs = []
    for size in range(1, MAX_LENGTH + 2):
        runs = []
        for _ in range(TIMED_RUNS):
            context.evaluate(sequence_type(reference.prompt), len(reference.prompt) - 1)
            tokens = list(reference.prompt) + following[:size]
            began = time.perf_counter()
            context.evaluate(sequence_type(tokens), len(reference.prompt))
            runs.append(time.perf_counter() - began)
        costs.append(min(runs))
    return tuple(costs)


def predicted_speedup(agreement: float, draft_seconds: float, target_seconds: float,
                      batch_seconds: tuple[float, ...] = ()) -> tuple[float, int]:
    """(speedup of target <- draft over the target alone, the draft length that gives it), taking agreement as
    each drafted token's chance of being kept, and a verification of k tokens as ``batch_seconds[k]`` (a batch
    of k + 1), or as one target token where that was not measured."""
    best = (1.0, 0)
    for length in range(1, MAX_LENGTH + 1):
        kept = (1 - agreement ** (length + 1)) / (1 - agreement) if agreement < 1 else length + 1.0
        verify = batch_seconds[length] if len(batch_seconds) > length else target_seconds
        speedup = kept * target_seconds / (verify + length * draft_seconds)
        best = max(best, (speedup, length))
    return best
