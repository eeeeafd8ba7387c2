"""The nested draft/verify loop over a chain of levels, target first.

Each level produces tokens distributed exactly as its own model: it asks the level below it for a draft,
evaluates [last token] + draft as one batch, keeps the longest prefix equal to its own choices and appends its
own next choice (a correction, or a bonus token when all were kept). A choice is the argmax when greedy; when
sampling, the token the position's noise picks from the level's processed distribution, the same noise at every
level (probabilities.py), so the answer is the target's own sample for the seed. The policy's plan says which
levels take part in a target round and how much each drafts; a level left out catches up when it next takes
part. A drafter the policy does not need from the first round (its ``upfront`` levels) leaves the prompt for that
catch-up too, so a level never planned never evaluates it. All levels share one TokenSequence, cut back on
rejection.
"""

from __future__ import annotations

import time

import numpy as np

from assistant.errors import AssistantError
from assistant.speculative.candidates import CandidateRows, candidate_count
from assistant.speculative.plan import Batch, Drafting, Hindsight, Plan, RoundRecord
from assistant.speculative.probabilities import Sampler, top_probability


class Chain:
    def __init__(self, levels, n_shared: int, n_ctx: int):
        self.levels = levels
        self.n_shared = n_shared
        self.n_ctx = n_ctx
        self.policy = None
        self.sequence = None
        self.origins: list[int] = []
        self.sampler: Sampler | None = None
        self.grammar = None  # engine/grammar.py's Grammar when the answer is constrained
        self.record = RoundRecord()
        self.proposed: tuple[int, dict] = (-1, {})  # (sequence length, proposals) at the round's start

    def start(self, sequence, sampling, policy, grammar=None) -> None:
        """Begin a generation over ``sequence`` (the prompt tokens), planned round by round by ``policy``; with
        ``grammar`` (engine/grammar.py, starting at the prompt's end) every level chooses among the tokens it
        allows, and drafts end where it forbids theirs."""
        self.sequence = sequence
        self.grammar = grammar
        self.origins = [-1] * len(sequence)
        self.greedy = sampling.greedy
        self.policy = policy
        policy.begin_generation(setting_key(sampling) + (("grammar",) if grammar is not None else ()))
        self.sampler = None if self.greedy else Sampler(sampling, self.n_shared)
        self._rebuilt_row = np.empty(self.n_shared, dtype=np.float32) if self.sampler else None
        self.record = RoundRecord()
        # The target's prompt first, and the policy's upfront levels'. A level with the target's attention
        # geometry (its MXFP4 copy) takes a copy of the target's cache instead unless it lacks only a few tokens
        # of the prompt (a regenerated answer): a drafter may use the target's keys and values, the prompt is not
        # evaluated twice, and the copy is cheap enough to make whether or not the level is planned. Any other
        # drafter evaluates the prompt when first planned, as a catch-up the policy priced.
        target = self.levels[0].context
        upfront = set(policy.upfront)
        for index, level in enumerate(self.levels):
            level.prepare(self.n_shared)
            if not level.is_model or (index and level.shares_target_cache and copying_pays(level.context, sequence)
                                      and level.context.adopt_cache(target)):
                continue
            if index and index not in upfront:
                if policy.wants_rate(index) and level.context.behind(sequence) > 2 * PROMPT_SLICE:
                    self._time_slice(index, sequence)
                continue
            context = level.context  # its logits are not read here: a remote target sends a token id instead
            (context.choose if getattr(context, "chooses", False) else context.evaluate)(sequence, len(sequence) - 1)
        if self.record.batches:
            policy.record(self.record)

    # --- the nested loop --------------------------------------------------------------------------
    def step(self, limit: int) -> list[tuple[int, int]]:
        """One verification by the target: 1..k+1 new tokens as (token, proposing level), at most ``limit``."""
        base = len(self.sequence)
        room = max(1, min(limit, self.n_ctx - base))
        proposals = self._proposals()
        plan = self.policy.plan([self._behind(level) for level in self.levels], room,
                                {index: len(proposal) for index, proposal in proposals.items()})
        self.record = RoundRecord()
        self.proposed = (base, proposals)
        self._verify(plan, 0, room)
        self._judge_in_hindsight(plan, proposals, base)
        self.policy.record(self.record)
        tokens = self.sequence.tokens
        return [(tokens[p], self.origins[p]) for p in range(base, len(tokens))]

    def _produce(self, plan: Plan, at: int, count: int, limit: int) -> int:
        """Append at least ``count`` and at most ``limit`` tokens distributed as the model at ``plan.shape[at]``.

        A middle level's last round drafts its full length while it fits under ``limit`` rather than
        shrinking to exactly what is left: a short batch costs about what a full one does, and the tokens
        past ``count`` are ones the level above verifies at no extra cost.
        """
        if at == len(plan.shape) - 1:
            return self._draft_alone(plan.shape[at], count, plan.stop_below)
        start = len(self.sequence)
        while (produced := len(self.sequence) - start) < count:
            self._verify(plan, at, limit - produced)
        return produced

    def _verify(self, plan: Plan, at: int, room: int) -> None:
        """The level at ``plan.shape[at]`` verifies one draft from the level below: appends 1 to ``room`` tokens."""
        index = plan.shape[at]
        level, drafter, below = self.levels[index], None, None
        if at and self._behind(level) > self.policy.max_length + 1:
            self._catch_up(index)  # apart from its verification, whose cost the policy learns per batch size
        base = len(self.sequence)
        wanted = min(plan.lengths[at], room - 1) if at + 1 < len(plan.shape) else 0
        drafted = 0
        if wanted > 0:
            drafter = plan.shape[at + 1]
            below = self.levels[drafter]
            drafted = self._produce(plan, at + 1, wanted, min(plan.rooms[at], room - 1))
        began = time.perf_counter()
        if self.grammar is not None:
            choice = self._constrained_choices(level, level.context.evaluate(self.sequence, base - 1), base)
        elif self.greedy:
            choice = self._row_choices(level.context, base - 1)
        else:
            choice = self._sampled_choices(level, self._row_logits(level.context, base - 1), base)
        accepted, token = self._verify_choices(choice, base, drafted)
        self._cut(base + accepted)
        self._append(token, index)
        exhausted = below is not None and not below.is_model and drafted < wanted  # an n-gram match ended
        self.record.batches.append(Batch(index, level.context.last_batch, time.perf_counter() - began, drafter,
                                         drafted, accepted, exhausted))
        if below is not None:
            below.stats.proposed += drafted
            below.stats.accepted += accepted
            below.rounds += 1 if drafted else 0

    def _time_slice(self, index: int, sequence) -> None:
        """The first PROMPT_SLICE tokens of the prompt at a level the policy has no prompt rate for: part of its
        catch-up should it be planned, and what the policy prices the rest of that catch-up by."""
        context = self.levels[index].context
        began = time.perf_counter()
        context.evaluate(type(sequence)(sequence.tokens[:PROMPT_SLICE]), PROMPT_SLICE - 1)
        if context.last_batch > self.policy.max_length + 1:  # not a cache that held most of the slice already
            self.record.batches.append(Batch(index, context.last_batch, time.perf_counter() - began))

    def _catch_up(self, index: int) -> None:
        """The level at ``index`` evaluates what it lacks of the sequence (a deferred prompt, rounds it sat out),
        recorded as a batch of its own."""
        context = self.levels[index].context
        began = time.perf_counter()
        context.evaluate(self.sequence, len(self.sequence) - 1)
        self.record.batches.append(Batch(index, context.last_batch, time.perf_counter() - began))

    def _draft_alone(self, index: int, count: int, stop_below: float) -> int:
        """``count`` tokens (greedy, fewer once the top probability falls under ``stop_below``) from the lowest
        level of the shape, one at a time."""
        level = self.levels[index]
        sequence = self.sequence
        began = time.perf_counter()
        if not level.is_model:
            at, proposals = self.proposed
            if at == len(sequence) and index in proposals:  # the round's first request: looked up already
                proposal = proposals[index][:count]
            else:
                proposal = self._allowed(level.propose(sequence, count))
            for token in proposal:
                self._append(token, index)
            self.record.drafts.append(Drafting(index, len(proposal), time.perf_counter() - began))
            return len(proposal)
        context = level.context
        produced = 0
        while produced < count:
            logits = context.evaluate(sequence, len(sequence) - 1)[0, : self.n_shared]
            # caught up on tokens it missed while left out: a batch, not drafting; two are its last draft and the
            # verifier's bonus token after a fully accepted draft, a cost of drafting the policy must see
            if context.last_batch > 2:
                caught_up = time.perf_counter()
                self.record.batches.append(Batch(index, context.last_batch, caught_up - began))
                began = caught_up
            if self.greedy:
                if stop_below and produced and top_probability(logits, level.scratch) < stop_below:
                    break
                token = int(logits.argmax())
            else:  # no early stop: with coupled choices a flat distribution is agreed on as often as a sharp one
                token = self.sampler.choose(self.sampler.probabilities(logits, level.scratch), len(sequence))
            if self.grammar is not None and not self.grammar.allows(len(sequence), token):
                break  # a draft is a proposal: its unmasked choice, ended where the grammar forbids it
            self._append(token, index)
            produced += 1
        self.record.drafts.append(Drafting(index, produced, time.perf_counter() - began))
        return produced

    # --- acceptance -------------------------------------------------------------------------------
    def _row_choices(self, context, first_output: int):
        """``choice(j)``: the context's argmax (over the shared vocabulary) of row j of its evaluation of the
        sequence from ``first_output``; made where the logits are when the context can (a remote target)."""
        if getattr(context, "chooses", False):
            choices = context.choose(self.sequence, first_output)
            return lambda j: int(choices[j])
        rows = context.evaluate(self.sequence, first_output)
        return lambda j: int(rows[j, : self.n_shared].argmax())

    def _row_logits(self, context, first_output: int):
        """``logits(j)``: row j of the context's evaluation of the sequence from ``first_output``, over the shared
        vocabulary; with top-k, rebuilt from each row's top candidates where the context chooses them where its
        logits are (a remote target), so only those cross the network."""
        if getattr(context, "chooses", False) and candidate_count(self.sampler):
            return CandidateRows(context, self.sequence, first_output, self.sampler, self._rebuilt_row)
        rows = context.evaluate(self.sequence, first_output)
        return lambda j: rows[j, : self.n_shared]

    def _sampled_choices(self, level, logits, base: int):
        """``choice(j)``: the token this level samples from row j (``logits(j)``), at sequence position base + j."""
        sampler = self.sampler
        return lambda j: sampler.choose(sampler.probabilities(logits(j), level.scratch), base + j)

    def _constrained_choices(self, level, rows, base: int):
        """``choice(j)``: as ``_row_choices`` or ``_sampled_choices`` for row j of ``rows``, among the tokens the
        grammar allows at position base + j: the best-scoring allowed token, except where top-k or top-p would
        cut the masked distribution elsewhere than the unmasked one (the whole vocabulary is masked there)."""
        grammar, sampler, n_shared = self.grammar, self.sampler, self.n_shared
        if sampler is None:
            return lambda j: grammar.best(base + j, rows[j, :n_shared])

        def sampled(j: int) -> int:
            position = base + j
            if not sampler.truncates:
                return grammar.best(position, sampler.scores(sampler.probabilities(rows[j, :n_shared], level.scratch),
                                                             position))
            masked = grammar.masked(position, rows[j, :n_shared])
            if not np.isfinite(masked.max()):
                raise AssistantError("the grammar allows no token here: the constrained answer cannot go on")
            return sampler.choose(sampler.probabilities(masked, level.scratch), position)
        return sampled

    def _verify_choices(self, choice, base: int, drafted: int) -> tuple[int, int]:
        """The longest prefix of the draft equal to this level's choices ``choice(j)``, then its own next token."""
        tokens = self.sequence.tokens
        for j in range(drafted):
            chosen = choice(j)
            if chosen != tokens[base + j]:
                return j, chosen
        return drafted, choice(drafted)

    # --- the shared sequence ----------------------------------------------------------------------
    def _proposals(self) -> dict[int, list[int]]:
        """What each limited drafter (the n-gram level) would propose from here: the policy's exact supply for a
        request made at the end of the sequence (cheap: one suffix match)."""
        return {index: self._allowed(level.propose(self.sequence, self.policy.max_length))
                for index, level in enumerate(self.levels) if not level.is_model}

    def _allowed(self, proposal: list[int]) -> list[int]:
        """``proposal`` for the sequence's end, cut where the grammar (if any) forbids it."""
        if self.grammar is None or not proposal:
            return proposal
        return self.grammar.allowed_prefix(len(self.sequence), proposal)

    def _judge_in_hindsight(self, plan: Plan, proposals: dict[int, list[int]], base: int) -> None:
        """Record how much of each limited drafter's proposal the round's tokens (all the target's) kept, where
        it did not draft for the target itself."""
        made = self.sequence.tokens[base:]
        for index, proposal in proposals.items():
            if plan.shape[:2] == (0, index):
                continue
            judged = min(len(proposal), len(made))
            accepted = next((j for j in range(judged) if proposal[j] != made[j]), judged)
            if judged:
                self.record.hindsight.append(Hindsight(index, accepted, accepted + (accepted < judged)))

    def _behind(self, level) -> int:
        """Tokens of the sequence that ``level`` has not evaluated yet (0 for the n-gram level)."""
        return level.context.behind(self.sequence) if level.is_model else 0

    def _append(self, token: int, origin: int) -> None:
        if self.grammar is not None:
            self.grammar.append(token)
        self.sequence.append(token)
        self.origins.append(origin)

    def _cut(self, length: int) -> None:
        if self.grammar is not None:
            self.grammar.truncate(length)
        self.sequence.truncate(length)
        del self.origins[length:]


# Prompt tokens a drafter with no measured prompt rate evaluates before the first round, to be timed: longer
# than any verification (so the policy takes it as a catch-up), short beside a prompt worth deferring.
PROMPT_SLICE = 32

# Tokens of cache copied in the time a drafter evaluates one prompt token, about the least of the real models
# measured (docs/ARCHITECTURE.md, "Kept between turns"); a larger model evaluates a token dearer against its
# cache's size, so for it this errs towards evaluating a few tokens that a copy would have brought sooner.
COPIES_PER_EVALUATION = 256


def copying_pays(context, sequence) -> bool:
    """Whether taking the target's cache beats evaluating what ``context`` lacks of ``sequence``: a copy moves
    every token's keys and values, an evaluation only the missing tail's, but each through every weight. So a
    drafter that holds all but a few tokens evaluates them itself; a follow-up question is copied."""
    return context.behind(sequence) * COPIES_PER_EVALUATION > len(sequence)


def setting_key(sampling) -> tuple:
    """What a policy keeps acceptance apart by: a draft's agreement with its verifier depends on how both
    choose (greedy, or the temperature and truncation of sampling), not on the seed."""
    return ("greedy",) if sampling.greedy else (sampling.temperature, sampling.top_k, sampling.top_p)
