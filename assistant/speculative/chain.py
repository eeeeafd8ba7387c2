"""The nested draft/verify loop (DESIGN.md, "the nested loop") over a chain of levels, target first.

Level i produces tokens distributed exactly as its own model: it asks level i+1 for a draft, evaluates
[last token] + draft as one batch, keeps the longest acceptable prefix and appends its own correction
(or a bonus token when all were kept). Greedy acceptance is "equals my argmax"; sampling acceptance is
speculative sampling against level i+1's distribution, which level i+1 computed while producing.
All levels share one TokenSequence: a level's tokens are appended to it and cut back on rejection.
Which levels take part, and how many tokens each drafts, is the policy's decision (policy.py), taken
before each verification by the target: a level left out simply catches up when it next takes part.
"""

from __future__ import annotations

import time

import numpy as np

from assistant.speculative.policy import ConstantLength
from assistant.speculative.probabilities import Sampler, top_probability

# Seeded sampling drafts a constant number of tokens: the adaptive policy's choices follow measured timings,
# and the random draws follow the draft schedule, so only a fixed schedule makes a seed reproduce its text.
SEEDED_DRAFT_LENGTH = 4


class Chain:
    def __init__(self, levels, policy, n_shared: int, n_ctx: int, confidence: float = 0.0, accept=None):
        self.levels = levels
        self.configured_policy = policy
        self.policy = policy
        self.n_shared = n_shared
        self.n_ctx = n_ctx
        self.confidence = confidence
        self.accept = accept or accept_ratio  # injectable only to show the tests catch a wrong rule
        self.sequence = None
        self.origins: list[int] = []
        self.sampler: Sampler | None = None

    def start(self, sequence, sampling) -> None:
        """Begin a generation over ``sequence`` (the prompt tokens)."""
        self.sequence = sequence
        self.origins = [-1] * len(sequence)
        self.greedy = sampling.greedy
        self.policy = self.configured_policy
        if not self.greedy and sampling.seed is not None and not isinstance(self.policy, ConstantLength):
            self.policy = ConstantLength(SEEDED_DRAFT_LENGTH, len(self.levels))
        self.policy.begin_generation()
        self.sampler = None if self.greedy else Sampler(sampling, self.n_shared, np.random.default_rng(sampling.seed))
        rows = self.policy.max_length + 2
        # Prompt processing first, so the draft-length policy times steady decoding. A level with the
        # target's attention geometry (its MXFP4 copy) takes a copy of the target's cache instead: a
        # drafter may use the target's keys and values, and the prompt is not evaluated twice.
        target = self.levels[0].context
        for index, level in enumerate(self.levels):
            level.prepare(self.n_shared, rows, not self.greedy)
            if not level.is_model or (index and level.shares_target_cache and level.context.adopt_cache(target)):
                continue
            level.context.evaluate(sequence, len(sequence) - 1)

    # --- verification rounds ----------------------------------------------------------------------
    def step(self, limit: int) -> list[tuple[int, int]]:
        """One verification by the target: 1..k+1 new tokens as (token, proposing level), at most ``limit``."""
        base = len(self.sequence)
        self.policy.begin_round([self._behind(level) for level in self.levels])
        self._round(0, max(1, min(limit, self.n_ctx - base)), 0)
        tokens = self.sequence.tokens
        return [(tokens[p], self.origins[p]) for p in range(base, len(tokens))]

    def _produce(self, index: int, count: int, limit: int, confidence: float) -> int:
        """Append at least ``count`` and at most ``limit`` tokens distributed as level ``index``'s model.

        A middle level's last round drafts its full length while it fits under ``limit`` rather than
        shrinking to exactly what is left: a short batch costs about what a full one does, and the tokens
        past ``count`` are ones the level above verifies at no extra cost. The last level makes exactly
        ``count`` (fewer when its top probability falls below ``confidence``).
        """
        if self.policy.drafter(index) is None:
            return self._draft_last(index, count, confidence)
        sequence = self.sequence
        start = len(sequence)
        while len(sequence) - start < count:
            produced = len(sequence) - start
            self._round(index, limit - produced, produced)
        return len(sequence) - start

    def _round(self, index: int, room: int, row: int) -> None:
        """Level ``index`` verifies one draft from the level below: appends 1 to ``room`` tokens.

        ``row`` is where this level's distributions for the new tokens go (sampling, levels below the target).
        """
        sequence = self.sequence
        policy = self.policy
        level, below = self.levels[index], None
        base = len(sequence)
        drafted = 0
        exhausted = False  # the drafter ran out of tokens to propose (an n-gram match ended)
        drafter = policy.drafter(index)
        wanted = min(policy.draft_length(index), room - 1) if drafter is not None else 0
        if wanted > 0:
            below = self.levels[drafter]
            confidence = policy.stop_threshold(index, drafter, self.confidence)
            drafted = self._produce(drafter, wanted, min(policy.verify_room(index, wanted), room - 1), confidence)
            exhausted = not below.is_model and drafted < wanted
        began = time.perf_counter()
        rows = level.context.evaluate(sequence, base - 1)
        if self.greedy:
            accepted, token = self._verify_greedy(rows, base, drafted)
        else:
            accepted, token = self._verify_sampled(index, below, rows, base, drafted, row)
        self._cut(base + accepted)
        self._append(token, index)
        policy.record_verify(index, level.context.last_batch, time.perf_counter() - began, drafted, accepted,
                             drafter if below is not None else None, exhausted)
        if below is not None:
            below.stats.proposed += drafted
            below.stats.accepted += accepted
            below.rounds += 1 if drafted else 0

    def _verify_greedy(self, rows: np.ndarray, base: int, drafted: int) -> tuple[int, int]:
        """The longest prefix of the draft equal to this level's argmax, then its own next token."""
        tokens = self.sequence.tokens
        for j in range(drafted):
            choice = int(rows[j, : self.n_shared].argmax())
            if choice != tokens[base + j]:
                return j, choice
        return drafted, int(rows[drafted, : self.n_shared].argmax())

    def _verify_sampled(self, index: int, below, rows: np.ndarray, base: int, drafted: int,
                        row: int) -> tuple[int, int]:
        """Speculative sampling of ``below``'s draft against this level's distribution."""
        level = self.levels[index]
        sampler = self.sampler
        keeps_rows = index > 0
        tokens = self.sequence.tokens
        for j in range(drafted):
            p = sampler.probabilities(rows[j, : self.n_shared], level.probabilities[row + j] if keeps_rows else level.scratch)
            q = below.probabilities[j] if below.is_model else None
            token = tokens[base + j]
            q_token = q[token] if q is not None else 1.0
            if not self.accept(sampler.uniform(), float(p[token]), float(q_token)):
                return j, sampler.residual_draw(p, q, token)
        p = sampler.probabilities(rows[drafted, : self.n_shared], level.probabilities[row + drafted] if keeps_rows else level.scratch)
        return drafted, sampler.draw(p)

    # --- the last level ---------------------------------------------------------------------------
    def _draft_last(self, index: int, count: int, confidence: float) -> int:
        """``count`` tokens (fewer below ``confidence``) from the lowest level of the shape, one at a time."""
        level = self.levels[index]
        sequence = self.sequence
        began = time.perf_counter()
        if not level.is_model:
            proposal = level.propose(sequence, count)
            for token in proposal:
                self._append(token, index)
            self.policy.record_draft(index, len(proposal), time.perf_counter() - began)
            return len(proposal)
        context = level.context
        produced = 0
        while produced < count:
            logits = context.evaluate(sequence, len(sequence) - 1)[0, : self.n_shared]
            if context.last_batch > 1:  # caught up on tokens it missed while left out: not drafting cost
                caught_up = time.perf_counter()
                self.policy.record_catch_up(index, context.last_batch, caught_up - began)
                began = caught_up
            if self.greedy:
                if confidence and produced and top_probability(logits, level.scratch) < confidence:
                    break
                token = int(logits.argmax())
            else:
                p = self.sampler.probabilities(logits, level.probabilities[produced])
                if confidence and produced and float(p.max()) < confidence:
                    break
                token = self.sampler.draw(p)
            self._append(token, index)
            produced += 1
        self.policy.record_draft(index, produced, time.perf_counter() - began)
        return produced

    def _behind(self, level) -> int:
        """Tokens of the sequence that ``level`` has not evaluated yet (0 for the n-gram level)."""
        return level.context.behind(self.sequence) if level.is_model else 0

    # --- the shared sequence ----------------------------------------------------------------------
    def _append(self, token: int, origin: int) -> None:
        self.sequence.append(token)
        self.origins.append(origin)

    def _cut(self, length: int) -> None:
        self.sequence.truncate(length)
        del self.origins[length:]


def accept_ratio(uniform: float, p_token: float, q_token: float) -> bool:
    """Speculative sampling: keep a draft token with probability min(1, p/q)."""
    return uniform * q_token < p_token
