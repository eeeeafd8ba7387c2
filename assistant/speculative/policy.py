"""Which levels take part in each verification by the target, and how many tokens each one drafts.

A *shape* is a sub-chain of the loaded levels that starts at the target: (0,) is the target alone, (0, 2)
the target verifying the small draft directly, (0, 1, 2) the full three-level chain. The chain asks its
policy, before every verification by the target, for the shape (``begin_round``), then per level for its
drafter (``drafter``) and draft length (``draft_length``).

``ConstantLength(k)`` is the paper's setting: every level, k drafts each. ``AdaptivePolicy`` predicts the
seconds per target token of every shape and takes the least, from two kinds of measurement
(``measurements``): each level's cost of evaluating a batch of n tokens (and of drafting alone), and the
acceptance of each (verifier, drafter) pair. A shape v0 <- v1 <- ... <- vm is predicted bottom up: vm
costs what it measured per drafted token; a verifier v whose drafter costs c per token and is accepted
with probability a picks the k minimising (cost_v(k + 1) + k c) / (1 + a + ... + a^k), and that minimum
is v's own cost per token for the level above. A pair never measured is predicted from the steps between
its levels (the smallest of their acceptances: optimistic, so that a promising shape gets tried).

A *limited* drafter (the n-gram level) proposes only what its match holds, often less than asked: its pairs
are predicted over the measured ``Supply`` of tokens per request, so that its misses cost the verification
they waste and its long copied runs earn what they yield, instead of bending the acceptance.

Costs describe the machine, so they persist between generations; acceptance describes the text, so each
generation starts from the previous one's ratios at a small weight. Exploration is bounded: a shape
predicted r times slower than the best is re-run once in EXPLORE_EVERY * r^3 target rounds, never when
r > EXPLORE_LIMIT, and only while its levels can catch up on the tokens they missed for at most the price
of CATCH_UP_BUDGET tokens of the target alone (on the EPYC: about a hundred tokens of the small draft, a
dozen or two of the MXFP4 copy). A shape with a pair that never ran is run once while r <= UNTRIED_LIMIT:
its prediction rests on the steps between, and one bad early reading of a step (the small draft proposing
nothing under the MXFP4 copy) had target <- small <- n-gram, the best chain for some prompts on the AMX
Xeon, predicted at 49 ms a token against 25, past what exploration re-runs.

Acceptance differs from answer to answer far more than the small prior weight of the last one admits: on
the bench set's prompts the small draft's tokens were kept 37-100% of the time. So each generation *probes*:
while a shape predicted at most PROBE_LIMIT times slower than the best has a pair of levels that no shape
run in this generation had, it runs once, best first (at the start every level is in step, so a probe costs
no catch-up). A pair counts as covered once its shape ran, judged or not: a middle level's drafter may not be
asked in a round, and a probe repeated until it was ran a random-weight draft five rounds of seven.
Without probes the best shape after one answer stayed the choice for the next, whose text favoured another:
on the AVX2 stand-in (the commit that added them) the chain spent 25.0 s decoding the 8 bench prompts (mean of
14 runs, 22.4-27.6) against 24.2 s with probes (6 runs, 23.4-26.6); on the AMX Xeon no change (16.5 s, 5 runs,
against 16.4 s, 5 runs of this and a first version that repeated a probe until its pairs were judged).
"""

from __future__ import annotations

from collections import Counter

from assistant.speculative.measurements import BatchCost, Rate, Supply

MAX_DRAFT = 15  # a batch of 16: one column chunk of the BF16 kernel
ROOM_TOLERANCE = 0.05  # a bigger batch counts as "the same price" within this fraction
STOP_SCALE = 2.5  # stop_threshold: confidence needed per unit of (draft token's cost / verification's cost)
PRIOR_ACCEPTANCE = 0.7  # an adjacent pair never measured
SMOOTHING = 2.0  # judged drafts' worth of the prior behind a measured acceptance
GENERATION_PRIOR = 4.0  # judged drafts' worth of the last generation's acceptance a new one starts from
EXPLORE_EVERY = 16  # target rounds between re-runs of a shape predicted as fast as the best (times r^3)
EXPLORE_LIMIT = 2.0  # a shape predicted more than this many times slower than the best is not re-run
CATCH_UP_BUDGET = 2.0  # target tokens' worth of time that levels re-joining a shape may spend catching up
SWITCH_MARGIN = 0.05  # leave the current shape for one whose levels must catch up only if this much faster
UNTRIED_LIMIT = 4.0  # a shape with a pair never run is run once if predicted at most this many times slower
PROBE_LIMIT = 1.5  # a shape with a pair no shape of this generation had runs once if at most this much slower


def shape_name(roles, shape) -> str:
    return "<-".join(roles[level] for level in shape)


class ConstantLength:
    """Every level, each drafting exactly ``length`` tokens for the level above."""

    def __init__(self, length: int, n_levels: int):
        self.length_value = max(0, int(length))
        self.max_length = max(self.length_value, 1)
        self.n_levels = n_levels
        self.rounds = 0

    def begin_generation(self) -> None:
        self.rounds = 0

    def begin_round(self, behind: list[int]) -> None:
        self.rounds += 1

    def drafter(self, level: int) -> int | None:
        return level + 1 if level + 1 < self.n_levels else None

    def draft_length(self, level: int) -> int:
        return self.length_value

    def verify_room(self, level: int, length: int) -> int:
        """The paper's setting: exactly ``length`` drafts per verification."""
        return length

    def stop_threshold(self, level: int, drafter: int, confidence: float) -> float:
        return confidence

    def record_verify(self, level: int, batch: int, seconds: float, drafted: int, accepted: int,
                      drafter: int | None, exhausted: bool = False) -> None:
        pass

    def record_draft(self, level: int, tokens: int, seconds: float) -> None:
        pass

    def record_catch_up(self, level: int, batch: int, seconds: float) -> None:
        pass

    def report(self, roles) -> dict:
        """Rounds per shape in this generation and each candidate's predicted seconds per token (none here)."""
        shape = tuple(range(self.n_levels)) if self.length_value else (0,)
        return {"shapes": {shape_name(roles, shape): self.rounds}, "predicted": {}}


class AdaptivePolicy:
    """Shape and draft lengths per target round, from measured costs and acceptance (module docstring)."""

    def __init__(self, n_levels: int, max_length: int = MAX_DRAFT, start_length: int = 4, decay: float = 0.95,
                 limited=()):
        self.n_levels = n_levels
        self.max_length = max_length
        self.start_length = start_length
        self.decay = decay
        self.cost = [BatchCost() for _ in range(n_levels)]  # evaluating and judging a batch, per level
        self.drafting = [Rate(decay) for _ in range(n_levels)]  # seconds per token when drafting alone
        self.pairs = {(v, d): Rate(decay) for v in range(n_levels) for d in range(v + 1, n_levels)}
        self.supply = {level: Supply(decay) for level in limited}  # tokens per request of limited drafters
        self.shapes = [(0, *(level for level in range(1, n_levels) if mask >> (level - 1) & 1))
                       for mask in range(2 ** (n_levels - 1))]
        self.shape = tuple(range(n_levels))
        self.lengths: dict[int, int] = {}
        self.rounds = 0  # target rounds over the policy's life
        self.last_run: dict[tuple, int] = {}
        self.used: Counter = Counter()  # rounds per shape in this generation
        self.tried: set[tuple[int, int]] = set()  # (verifier, drafter) pairs that have run
        self.predicted: dict[tuple, float] = {}

    # --- the chain's questions --------------------------------------------------------------------
    def begin_generation(self) -> None:
        for measured in (*self.pairs.values(), *self.supply.values()):
            measured.shrink(GENERATION_PRIOR)
        self.used.clear()

    def begin_round(self, behind: list[int]) -> None:
        """Choose the shape for the next verification by the target; ``behind[i]``: tokens level i lacks."""
        self.rounds += 1
        predictions = self._predictions()
        if predictions is None:  # some level not measured yet: run them all once
            shape, self.lengths = tuple(range(self.n_levels)), {}
        else:
            self.predicted = {shape: seconds for shape, (seconds, _) in predictions.items()}
            shape = self._choose(behind)
            self.lengths = predictions[shape][1]
        self.shape = shape
        self.last_run[shape] = self.rounds
        self.used[shape] += 1

    def drafter(self, level: int) -> int | None:
        shape = self.shape
        position = shape.index(level)
        return shape[position + 1] if position + 1 < len(shape) else None

    def draft_length(self, level: int) -> int:
        return self.lengths.get(level, self.start_length)

    def verify_room(self, level: int, length: int) -> int:
        """How many drafts ``level`` can verify for (about) the price of ``length``: the level below may
        hand up that many when its last round runs past ``length``."""
        cost = self.cost[level]
        if not cost.known:
            return length
        budget = cost.seconds(length + 1) * (1 + ROOM_TOLERANCE)
        room = length
        while room < self.max_length and cost.seconds(room + 2) <= budget:
            room += 1
        return room

    def stop_threshold(self, level: int, drafter: int, confidence: float) -> float:
        """The top probability below which the last level stops drafting for ``level``: ``confidence`` at
        most, lower when a draft token is cheap beside the verification it may save (a small draft under
        a memory-bound target should keep going; under a verifier hardly dearer than itself, stop early)."""
        rate = self.drafting[drafter]
        cost = self.cost[level]
        if not confidence or not cost.known or not rate.known:
            return confidence
        return min(confidence, STOP_SCALE * rate.value() / cost.seconds(1))

    # --- measurements -----------------------------------------------------------------------------
    def record_verify(self, level: int, batch: int, seconds: float, drafted: int, accepted: int,
                      drafter: int | None, exhausted: bool = False) -> None:
        """One verification: its batch and time; with a ``drafter``, how many of its drafts were kept.

        Drafts after the first rejected one were never judged (counting them as rejections would make
        a = 0.9 look like 0.6 at k = 8); a model drafter that proposed nothing (it stopped below its
        confidence threshold) counts as one rejection. A limited drafter's tokens per request go to its
        ``Supply`` instead, ``exhausted`` when its match ran out before the request was filled: counted
        as a rejection, as once here, the n-gram level under the small draft read a ~ 0.3, and the chain
        target <- small <- n-gram, measured at 11.6 ms a token on the AMX Xeon, was predicted at 17.8 and
        seldom run (now 16.4 against 14.8 measured).
        """
        self.cost[level].add(batch, seconds)
        if drafter is None:
            return
        self.tried.add((level, drafter))
        judged = drafted
        if drafter in self.supply:
            self.supply[drafter].add(drafted, exhausted)
        else:
            judged = max(drafted, 1)  # a model that proposed nothing counts as one rejection
        self.pairs[level, drafter].add(accepted, accepted + (accepted < judged))

    def record_draft(self, level: int, tokens: int, seconds: float) -> None:
        """The last level of a shape drafted ``tokens`` in ``seconds`` (catching up excluded)."""
        self.drafting[level].add(seconds, max(tokens, 1))

    def record_catch_up(self, level: int, batch: int, seconds: float) -> None:
        """The last level of a shape evaluated the ``batch`` tokens it had missed: what re-running a shape
        with a lagging level costs (``_in_step``), measured instead of guessed from short batches."""
        self.cost[level].add(batch, seconds)

    # --- predictions ------------------------------------------------------------------------------
    def acceptance(self, level: int, drafter: int) -> float:
        """The chance that ``level`` keeps a token ``drafter`` proposed, given it kept the ones before."""
        prior = (PRIOR_ACCEPTANCE if drafter == level + 1 else
                 min(self.acceptance(step, step + 1) for step in range(level, drafter)))
        rate = self.pairs[level, drafter]
        return min(rate.value(prior, SMOOTHING) if rate.known else prior, 0.995)

    def predict(self, shape) -> tuple[float, dict[int, int]] | None:
        """Seconds per target token of ``shape`` and each verifier's draft length; None if not measured."""
        per_token = self._alone_seconds(shape[-1])
        if per_token is None:
            return None
        lengths = {}
        for verifier, drafter in reversed(list(zip(shape, shape[1:]))):
            if not self.cost[verifier].known:
                return None
            lengths[verifier], per_token = self._best_length(verifier, drafter, per_token)
        return per_token, lengths

    def _alone_seconds(self, level: int) -> float | None:
        """Seconds per token of ``level`` producing on its own (the target decoding one token at a time)."""
        if level and self.drafting[level].known:
            return self.drafting[level].value()
        return self.cost[level].seconds(1) if self.cost[level].known else None

    def _best_length(self, verifier: int, drafter: int, per_draft: float) -> tuple[int, float]:
        """The draft length for ``verifier`` and the seconds per token it then achieves."""
        acceptance = self.acceptance(verifier, drafter)
        if drafter in self.supply:
            return self._best_limited_length(verifier, drafter, per_draft, acceptance)
        cost = self.cost[verifier]
        best_k, best_seconds = 1, float("inf")
        gain = power = 1.0  # expected tokens from k drafts, built up incrementally
        for k in range(1, self.max_length + 1):
            power *= acceptance
            gain += power
            seconds = (cost.seconds(k + 1) + k * per_draft) / gain
            if seconds < best_seconds:
                best_k, best_seconds = k, seconds
        return best_k, best_seconds

    def _best_limited_length(self, verifier: int, drafter: int, per_draft: float,
                             acceptance: float) -> tuple[int, float]:
        """As ``_best_length``, over the drafter's measured supply: asked for k, it yields n = min(k, what it
        has) drafts, for a batch of n + 1 and 1 + a + ... + a^n expected tokens."""
        cost = self.cost[verifier]
        chance = self.supply[drafter].distribution(self.max_length)
        spent = [cost.seconds(n + 1) + n * per_draft for n in range(self.max_length + 1)]
        gains = [1.0]
        for n in range(1, self.max_length + 1):
            gains.append(gains[-1] + acceptance**n)
        best_k, best_seconds = 1, float("inf")
        short_spent = short_gain = 0.0  # over the requests whose supply is below k
        filled = 1.0  # the chance that the supply fills a request for k
        for k in range(1, self.max_length + 1):
            short_spent += chance[k - 1] * spent[k - 1]
            short_gain += chance[k - 1] * gains[k - 1]
            filled -= chance[k - 1]
            seconds = (short_spent + filled * spent[k]) / (short_gain + filled * gains[k])
            if seconds < best_seconds:
                best_k, best_seconds = k, seconds
        return best_k, best_seconds

    def _predictions(self) -> dict[tuple, tuple[float, dict[int, int]]] | None:
        predictions = {}
        for shape in self.shapes:
            predicted = self.predict(shape)
            if predicted is None:
                if shape == tuple(range(self.n_levels)):
                    return None
                continue
            predictions[shape] = predicted
        return predictions

    def _choose(self, behind: list[int]) -> tuple:
        """The best predicted shape, a shape due for re-measurement, or (to spare a catch-up) the current one."""
        predicted = self.predicted
        ranked = sorted(predicted, key=predicted.get)
        for shape in ranked:
            if predicted[shape] > UNTRIED_LIMIT * predicted[ranked[0]]:
                break
            if not self.tried.issuperset(zip(shape, shape[1:])) and self._in_step(shape, behind):
                return shape
        covered = {pair for shape in self.used for pair in zip(shape, shape[1:])}  # by this generation's shapes
        for shape in ranked:  # probes: each generation judges its pairs on its own text
            if predicted[shape] > PROBE_LIMIT * predicted[ranked[0]]:
                break
            if not covered.issuperset(zip(shape, shape[1:])) and self._in_step(shape, behind):
                return shape
        best = ranked[0]
        if (not self._in_step(best, behind) and self.shape in predicted
                and predicted[best] > (1 - SWITCH_MARGIN) * predicted[self.shape]):
            best = self.shape
        for shape in ranked[1:]:
            ratio = predicted[shape] / predicted[ranked[0]]
            if ratio > EXPLORE_LIMIT:
                break
            if self.rounds - self.last_run.get(shape, 0) >= EXPLORE_EVERY * ratio**3 and self._in_step(shape, behind):
                return shape
        return best

    def _in_step(self, shape, behind: list[int]) -> bool:
        """Whether the levels of ``shape`` can evaluate the tokens they missed for at most CATCH_UP_BUDGET
        tokens of the target alone (each in one batch, at the cheapest rate per token it has measured)."""
        catch_up = sum(behind[level] * self.cost[level].cheapest_per_token()
                       for level in shape[1:] if behind[level] > 1 and self.cost[level].known)
        return catch_up <= CATCH_UP_BUDGET * self.cost[0].seconds(1)

    def report(self, roles) -> dict:
        """Rounds per shape in this generation and each candidate's predicted seconds per target token."""
        return {"shapes": {shape_name(roles, shape): rounds for shape, rounds in self.used.most_common()},
                "predicted": {shape_name(roles, shape): seconds
                              for shape, seconds in sorted(self.predicted.items(), key=lambda item: item[1])}}


def make_policy(draft_length, n_levels: int, limited=()):
    """``limited``: the levels that propose only what they have (the n-gram drafter)."""
    if draft_length == "adaptive":
        return AdaptivePolicy(n_levels, limited=limited)
    try:
        return ConstantLength(int(draft_length), n_levels)
    except (TypeError, ValueError):
        from assistant.errors import AssistantError

        raise AssistantError(f"draft length must be a number or 'adaptive', not {draft_length!r}") from None
