"""Which shape the adaptive policy runs next: the fastest over the rest of the answer, unless another is due
to be measured.

A shape whose levels missed tokens (rounds they sat out, or the whole prompt of a drafter that has not run in
this generation: its prompt is evaluated only when first planned) must first catch up. The best shape is the
least predicted time for the rest of the answer, that catch-up included: seconds per token plus the catch-up
spread over the tokens it buys. A deferred prompt is paid once, so it is spread over the tokens the answer is
expected to still run (a typical answer's length, at most what its limit leaves): a drafter joins late in an
answer, or on a long prompt, only where it repays it. A re-join (a level that ran in this generation and sat
out rounds since) recurs whenever the policy leaves the shape and comes back, so it is spread over the shape's
measured stays: the target tokens it made, from the round it was chosen as the best until the policy left it.

A level that has never taken part in a round cannot be predicted. While some can take part, the policy runs
them all (with the levels already measured) to measure them; a never-run level whose prompt catch-up, priced at
the rate of the slice of the prompt it evaluated before the first round, is more than FIRST_USE_SHARE of the
rest of the answer at the target alone's speed (what it might save) is left out, and shapes without it are
predicted as usual. The first round runs the target alone when such a price is known, so that the target's
own speed is measured first.

Predictions rest on measurements, and a shape never re-run is never re-measured, so three rules run a
shape other than the best, each only while its levels can catch up for at most the price of CATCH_UP_BUDGET
tokens of the target alone plus MEASURE_SHARE of the rest of the answer's predicted time (a longer answer has
more to gain from what a measurement finds):
- untried: a shape with a pair that never ran is run once while predicted at most UNTRIED_LIMIT times slower
  than the best (its prediction rests on the steps between, and one bad early reading can sink it);
- probes: acceptance differs from answer to answer far more than the last answer's small prior weight
  admits, so each generation runs once, best first, every shape within PROBE_LIMIT of the best that has a
  pair no shape of this generation had (a pair counts as covered once its shape ran, judged or not: a middle
  level's drafter may not be asked in a round);
- exploration: a shape predicted r times slower than the best (its levels' re-joins included: a level that
  sat out rounds pays a catch-up at every return) is re-run once in EXPLORE_EVERY * r^3 target rounds, never
  when r > EXPLORE_LIMIT.
"""

from __future__ import annotations

from collections import Counter

from assistant.speculative.measurements import Rate

EXPLORE_EVERY = 16  # target rounds between re-runs of a shape predicted as fast as the best (times r^3)
EXPLORE_LIMIT = 2.0  # a shape predicted more than this many times slower than the best is not re-run
CATCH_UP_BUDGET = 2.0  # target tokens' worth of time that levels re-joining a shape may spend catching up
MEASURE_SHARE = 0.25  # and this share of the rest of the answer's predicted time, when its length is known
SWITCH_MARGIN = 0.05  # leave the current shape for one whose levels must catch up only if this much faster
UNTRIED_LIMIT = 4.0  # a shape with a pair never run is run once if predicted at most this many times slower
PROBE_LIMIT = 1.5  # a shape with a pair no shape of this generation had runs once if at most this much slower
FIRST_USE_SHARE = 0.5  # a never-run level may spend this share of the rest at the target alone catching up
STAY_DECAY = 0.8  # the weight of a shape's earlier stays against its latest one


class Explorer:
    """The shapes run so far (over the policy's life and in this generation) and the choice of the next."""

    def __init__(self, n_levels: int):
        self.full = tuple(range(n_levels))
        self.shapes = [(0, *(level for level in range(1, n_levels) if mask >> (level - 1) & 1))
                       for mask in range(2 ** (n_levels - 1))]
        self.shape = self.full
        self.rounds = 0  # target rounds over the policy's life
        self.last_run: dict[tuple, int] = {}
        self.used: Counter = Counter()  # rounds per shape in this generation
        self.tried: set[tuple[int, int]] = set()  # (verifier, drafter) pairs that have run
        self.stays: dict[tuple, Rate] = {}  # per shape, the target tokens of a stay chosen as the best
        self.staying = None  # the shape of the stay under way (its consecutive rounds in this generation)
        self.stay = 0  # and the target tokens it made
        self.chosen_as_best = False  # whether the stay under way began as the best choice (not a measurement)

    def begin_generation(self) -> None:
        self._end_stay()
        self.used.clear()

    def produced(self, tokens: int) -> None:
        """The last round's shape made ``tokens`` target tokens."""
        self.stay += tokens

    def _end_stay(self) -> None:
        if self.chosen_as_best and self.stay:
            self.stays.setdefault(self.staying, Rate(STAY_DECAY)).add(self.stay, 1.0)
        self.staying, self.stay, self.chosen_as_best = None, 0, False

    def horizon(self, shape, remaining: int | None) -> int | None:
        """The target tokens a re-join made to run ``shape`` now is spread over: until the policy leaves the
        shape again (the length of its measured stays) or the answer ends, whichever comes first. Switching
        back and forth, as an n-gram match comes and goes, pays a level's re-join at every return."""
        stays = self.stays.get(shape)
        if remaining is None or stays is None or not stays.known:  # no length known: catch-ups weigh in_step only
            return remaining
        return min(max(1, round(stays.value())), remaining)

    def usable(self, behind: list[int], model, remaining: int | None = None) -> tuple:
        """The levels that may take part in this round: all but the never-run ones whose catch-up could not repay
        itself; only the target while its own speed is unknown and some such price is known."""
        pending = [level for level in self.full[1:] if not model.measured(level)]
        alone = model.alone_seconds(0)
        if alone is None:
            priced = any(behind[level] > 1 and model.catch_up_rate(level) for level in pending)
            return (0,) if priced else self.full
        budget = (CATCH_UP_BUDGET + FIRST_USE_SHARE * (remaining or 0)) * alone
        return tuple(level for level in self.full
                     if level not in pending or model.catch_up_seconds((0, level), behind) <= budget)

    def next_shape(self, predicted: dict[tuple, float] | None, behind: list[int], model,
                   remaining: int | None = None, usable: tuple | None = None) -> tuple:
        """The shape of the next target round; ``predicted`` None (a usable level not measured yet) runs every
        ``usable`` level (by default all). ``behind[i]``: tokens level i lacks; ``model``: the cost model that
        prices their catching up; ``remaining``: the tokens the answer is expected to still run (None: unknown,
        catch-ups then weigh only against CATCH_UP_BUDGET)."""
        self.rounds += 1
        best = False
        if predicted is None:
            shape = usable or self.full
        else:
            shape, best = self._choose(predicted, behind, model, remaining)
        if shape != self.staying:
            self._end_stay()
            self.staying, self.chosen_as_best = shape, best
        self.shape = shape
        self.last_run[shape] = self.rounds
        self.used[shape] += 1
        return shape

    def _choose(self, predicted: dict[tuple, float], behind: list[int], model,
                remaining: int | None) -> tuple[tuple, bool]:
        """The best shape over the rest of the answer, a shape due for re-measurement, or (to spare a catch-up)
        the current one; and whether it was chosen as the best (not to be measured)."""
        joined = {level for shape in self.used for level in shape}  # levels of this generation's rounds
        parts = {shape: model.catch_up_parts(shape, behind, joined) for shape in predicted}
        catch_up = {shape: sum(parts[shape]) for shape in predicted}
        ranked = sorted(predicted, key=predicted.get)
        budget = CATCH_UP_BUDGET * model.alone_seconds(0)
        if remaining:
            budget += MEASURE_SHARE * remaining * predicted[ranked[0]]

        def in_step(shape) -> bool:
            return catch_up[shape] <= budget

        def per_token(shape) -> float:  # catching up included: a re-join over the stay, a long one over the rest
            rejoins, long = parts[shape]
            stay = self.horizon(shape, remaining)
            return predicted[shape] + (rejoins / stay if stay else 0.0) + (long / remaining if remaining else 0.0)

        for shape in ranked:
            if predicted[shape] > UNTRIED_LIMIT * predicted[ranked[0]]:
                break
            if not self.tried.issuperset(zip(shape, shape[1:])) and in_step(shape):
                return shape, False
        covered = {pair for shape in self.used for pair in zip(shape, shape[1:])}  # by this generation's shapes
        for shape in ranked:
            if predicted[shape] > PROBE_LIMIT * predicted[ranked[0]]:
                break
            if not covered.issuperset(zip(shape, shape[1:])) and in_step(shape):
                return shape, False
        costs = {shape: per_token(shape) for shape in ranked}  # a re-run pays its levels' re-joins too
        by_cost = sorted(ranked, key=costs.get)
        best = by_cost[0]
        if (not in_step(best) and self.shape in predicted
                and costs[best] > (1 - SWITCH_MARGIN) * costs[self.shape]):
            best = self.shape
        for shape in by_cost[1:]:
            ratio = costs[shape] / costs[by_cost[0]]
            if ratio > EXPLORE_LIMIT:
                break
            if self.rounds - self.last_run.get(shape, 0) >= EXPLORE_EVERY * ratio**3 and in_step(shape):
                return shape, False
        return best, True
