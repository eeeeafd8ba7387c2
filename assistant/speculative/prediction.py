"""The adaptive policy's cost model: seconds per target token of every shape, from what the levels measured.

Two kinds of measurement (measurements.py): each level's cost of evaluating a batch of n tokens (and of
drafting alone), and the acceptance of each (verifier, drafter) pair. A shape v0 <- v1 <- ... <- vm is
predicted bottom up: vm costs what it measured per drafted token; a verifier v whose drafter costs c per
token and is accepted with probability a picks the k minimising (cost_v(k + 1) + k c) / (1 + a + ... + a^k),
and that minimum is v's own cost per token for the level above. A pair never measured is predicted from the
steps between its levels (the smallest of their acceptances: optimistic, so that a promising shape gets tried).

A *limited* drafter (the n-gram level) proposes only what its match holds, often less than asked: its pairs
are predicted over the measured ``Supply`` of tokens per request, so that its misses cost the verification
they waste and its long copied runs earn what they yield, instead of bending the acceptance. What a verifier
keeps of its proposals is no compounding acceptance either (a copied stretch is kept whole, a guess fails at
once): it is predicted from the measured ``RunLength`` of the runs kept. Drafting for the target it makes one
request a round, at the end of the sequence, where its supply is known before the round: that round is
predicted with it (a match of one token never passes for a typical long one). Its proposals
cost nothing to judge once a round's tokens are known, so its pair with the target is measured every round,
whatever the shape ran (``Hindsight``): a copied stretch of text is noticed as it starts, not when the n-gram
level happens to be re-run.

A batch longer than any verification is a level catching up on tokens it missed (a deferred prompt, or
rounds it sat out): it goes to that level's catch-up rate, not to its batch costs, so that pricing a shape's
catch-up uses what catching up really cost, and a prompt-sized batch never stands in for a verification.

Costs describe the machine, so they persist between generations; acceptance describes the text and how the
levels choose, so each generation starts from the ratios of the previous one with the same sampling setting, at
a small weight.
"""

from __future__ import annotations

from assistant.speculative.measurements import BatchCost, Rate, RunLength, Supply
from assistant.speculative.plan import RoundRecord

MAX_DRAFT = 15  # a batch of 16: one column chunk of the BF16 kernel
ROOM_TOLERANCE = 0.05  # a bigger batch counts as "the same price" within this fraction
STOP_SCALE = 2.5  # stop_threshold: confidence needed per unit of (draft token's cost / verification's cost)
PRIOR_ACCEPTANCE = 0.7  # an adjacent pair never measured
SMOOTHING = 2.0  # judged drafts' worth of the prior behind a measured acceptance
GENERATION_PRIOR = 4.0  # judged drafts' worth of the last generation's acceptance a new one starts from


class CostModel:
    """Measured costs and acceptance per level and pair, and the predictions drawn from them."""

    def __init__(self, n_levels: int, max_length: int = MAX_DRAFT, decay: float = 0.95, limited=()):
        self.n_levels = n_levels
        self.max_length = max_length
        self.cost = [BatchCost() for _ in range(n_levels)]  # evaluating and judging a batch, per level
        self.drafting = [Rate(decay) for _ in range(n_levels)]  # seconds per token when drafting alone
        self.catching = [Rate(decay) for _ in range(n_levels)]  # seconds per token of batches past a verification
        self.decay, self.limited = decay, tuple(limited)
        self.settings: dict = {}  # per sampling setting, its (pairs, supply, runs)
        self.pairs, self.supply, self.runs = self._acceptance()
        self._tables: dict[int, list[float]] = {}  # per level, batch seconds by size, until the next record

    def _acceptance(self) -> tuple[dict, dict, dict]:
        """Fresh acceptance measurements: per pair, per limited drafter (its tokens per request), and per pair
        with a limited drafter (the runs its verifier kept)."""
        decay, n_levels = self.decay, self.n_levels
        pairs = {(v, d): Rate(decay) for v in range(n_levels) for d in range(v + 1, n_levels)}
        supply = {level: Supply(decay) for level in self.limited}
        runs = {(v, d): RunLength(decay) for (v, d) in pairs if d in supply}
        return pairs, supply, runs

    def begin_generation(self, setting=None) -> None:
        """Take up ``setting``'s acceptance (a draft agrees with its verifier far less when both sample at a high
        temperature than when both are greedy), at a small weight; costs stay, they describe the machine."""
        if setting not in self.settings:
            self.settings[setting] = self._acceptance()
        self.pairs, self.supply, self.runs = self.settings[setting]
        for measured in (*self.pairs.values(), *self.supply.values(), *self.runs.values()):
            measured.shrink(GENERATION_PRIOR)

    def learn(self, record: RoundRecord) -> None:
        """Take in one round's batches and drafting times.

        Drafts after the first rejected one were never judged (counting them as rejections would make a = 0.9
        look like 0.6 at k = 8); a model drafter that proposed nothing (it stopped below its confidence
        threshold) counts as one rejection. A limited drafter's tokens per request go to its ``Supply``
        instead, and a request it could not fill counts as a rejection where its match ran out.
        """
        self._tables.clear()
        for batch in record.batches:
            if batch.drafter is None and batch.size > self.max_length + 1:
                self.catching[batch.level].add(batch.seconds, batch.size)
                continue
            self.cost[batch.level].add(batch.size, batch.seconds)
            if batch.drafter is None:
                continue
            judged = batch.drafted
            if batch.drafter in self.supply:
                self.supply[batch.drafter].add(batch.drafted, batch.exhausted)
                if batch.drafted:
                    self.runs[batch.level, batch.drafter].add(batch.accepted, batch.accepted < batch.drafted)
            else:
                judged = max(batch.drafted, 1)
            self.pairs[batch.level, batch.drafter].add(batch.accepted, batch.accepted + (batch.accepted < judged))
        for drafting in record.drafts:
            self.drafting[drafting.level].add(drafting.seconds, max(drafting.tokens, 1))
        for seen in record.hindsight:
            self.pairs[0, seen.drafter].add(seen.accepted, seen.judged)
            self.runs[0, seen.drafter].add(seen.accepted, seen.accepted < seen.judged)

    # --- what a plan needs besides the shape ------------------------------------------------------
    def room(self, level: int, length: int) -> int:
        """How many drafts ``level`` can verify for (about) the price of ``length``."""
        cost = self.cost[level]
        if not cost.known:
            return length
        budget = cost.seconds(length + 1) * (1 + ROOM_TOLERANCE)
        room = length
        while room < self.max_length and cost.seconds(room + 2) <= budget:
            room += 1
        return room

    def stop_threshold(self, level: int, drafter: int, confidence: float) -> float:
        """The top probability below which ``drafter`` stops drafting for ``level``: ``confidence`` at most,
        lower when a draft token is cheap beside the verification it may save (a small draft under a
        memory-bound target should keep going; under a verifier hardly dearer than itself, stop early)."""
        rate = self.drafting[drafter]
        cost = self.cost[level]
        if not confidence or not cost.known or not rate.known:
            return confidence
        return min(confidence, STOP_SCALE * rate.value() / cost.seconds(1))

    def measured(self, level: int) -> bool:
        """Whether ``level`` has taken part in a round (verified or drafted), not only caught up."""
        return self.cost[level].known or self.drafting[level].known

    def catch_up_seconds(self, shape, behind: list[int]) -> float:
        """What the levels of ``shape`` spend evaluating the tokens they missed (a drafter's deferred prompt
        included), each in one batch: both parts of ``catch_up_parts``."""
        return sum(self.catch_up_parts(shape, behind))

    def catch_up_parts(self, shape, behind: list[int], joined=()) -> tuple[float, float]:
        """The catch-ups of ``shape``'s levels as (re-joins, long ones). A level that missed no more than a
        verification's worth of tokens re-joins at the measured cost of a batch of that size (a few tokens cost
        about what a verification does, far more than the same tokens of a long batch); a longer catch-up costs
        the level's catch-up rate. Either is a re-join, paid again whenever the policy returns to the level, if
        the level is in ``joined`` (it has taken part in this generation: what it missed are rounds it sat
        out) or the catch-up is short; a long one of a level yet to join (its deferred prompt) is paid once. A
        level with neither measurement (it evaluated no slice of a prompt: the prompt was short) counts
        nothing."""
        rejoins = long = 0.0
        for level in shape[1:]:
            missed = behind[level]
            if missed <= 1:
                continue
            if missed <= self.max_length + 1 and self.cost[level].known:
                rejoins += self.cost[level].seconds(missed)
            elif level in joined:
                rejoins += missed * self.catch_up_rate(level)
            else:
                long += missed * self.catch_up_rate(level)
        return rejoins, long

    def catch_up_rate(self, level: int) -> float:
        """Seconds per token of a long batch: the least of the level's measured catch-ups and of its batches'
        cheapest rate per token (a longer batch is no dearer per token on our kernels, so this errs high)."""
        rates = [self.cost[level].cheapest_per_token()] if self.cost[level].known else []
        if self.catching[level].known:
            rates.append(self.catching[level].value())
        return min(rates, default=0.0)

    # --- predictions ------------------------------------------------------------------------------
    def acceptance(self, level: int, drafter: int) -> float:
        """The chance that ``level`` keeps a token ``drafter`` proposed, given it kept the ones before."""
        prior = (PRIOR_ACCEPTANCE if drafter == level + 1 else
                 min(self.acceptance(step, step + 1) for step in range(level, drafter)))
        rate = self.pairs[level, drafter]
        return min(rate.value(prior, SMOOTHING) if rate.known else prior, 0.995)  # never certain

    def predictions(self, shapes, required=None, supply=None) -> dict[tuple, tuple[float, dict[int, int]]] | None:
        """``predict`` for every shape that can be predicted; None while ``required`` (by default the full
        chain) cannot."""
        required = tuple(range(self.n_levels)) if required is None else tuple(required)
        predictions = {}
        for shape in shapes:
            predicted = self.predict(shape, supply)
            if predicted is not None:
                predictions[shape] = predicted
        return predictions if required in predictions else None

    def predict(self, shape, supply=None) -> tuple[float, dict[int, int]] | None:
        """Seconds per target token of ``shape`` and each verifier's draft length; None if not measured.
        ``supply``: what each limited drafter has right now (used where it drafts for the target)."""
        per_token = self.alone_seconds(shape[-1])
        if per_token is None:
            return None
        lengths = {}
        for verifier, drafter in reversed(list(zip(shape, shape[1:]))):
            if not self.cost[verifier].known:
                return None
            known = (supply or {}).get(drafter) if verifier == 0 else None
            lengths[verifier], per_token = self._best_length(verifier, drafter, per_token, known)
        return per_token, lengths

    def alone_seconds(self, level: int) -> float | None:
        """Seconds per token of ``level`` producing on its own (the target decoding one token at a time)."""
        if level and self.drafting[level].known:
            return self.drafting[level].value()
        return self.cost[level].seconds(1) if self.cost[level].known else None

    def _table(self, level: int) -> list[float]:
        """``table[n]``: the level's predicted seconds for a batch of n (n >= 1), worked out once per record
        (every plan predicts every shape, and shapes share their levels)."""
        if level not in self._tables:
            cost = self.cost[level]
            self._tables[level] = [0.0] + [cost.seconds(n) for n in range(1, self.max_length + 2)]
        return self._tables[level]

    def _best_length(self, verifier: int, drafter: int, per_draft: float,
                     known: int | None = None) -> tuple[int, float]:
        """The draft length for ``verifier`` and the seconds per token it then achieves; ``known``: a limited
        drafter's supply for this request, when known."""
        acceptance = self.acceptance(verifier, drafter)
        if drafter in self.supply:
            return self._best_limited_length(verifier, drafter, per_draft, acceptance, known)
        batch = self._table(verifier)
        best_k, best_seconds = 1, float("inf")
        gain = power = 1.0  # expected tokens from k drafts, built up incrementally
        for k in range(1, self.max_length + 1):
            power *= acceptance
            gain += power
            seconds = (batch[k + 1] + k * per_draft) / gain
            if seconds < best_seconds:
                best_k, best_seconds = k, seconds
        return best_k, best_seconds

    def _best_limited_length(self, verifier: int, drafter: int, per_draft: float, acceptance: float,
                             known: int | None = None) -> tuple[int, float]:
        """As ``_best_length``, over the drafter's measured supply (or the ``known`` one): asked for k, it yields
        n = min(k, what it has) drafts, for a batch of n + 1 and 1 + P(run >= 1) + ... + P(run >= n) expected
        tokens, from the runs this verifier kept of its proposals (``acceptance`` where none was seen)."""
        batch = self._table(verifier)
        if known is None:
            chance = self.supply[drafter].distribution(self.max_length)
        else:
            chance = [0.0] * (self.max_length + 1)
            chance[min(known, self.max_length)] = 1.0
        spent = [batch[n + 1] + n * per_draft for n in range(self.max_length + 1)]
        lasting = self.runs[verifier, drafter].lasting(self.max_length, acceptance)
        gains = [1.0]
        for n in range(1, self.max_length + 1):
            gains.append(gains[-1] + lasting[n])
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
