"""What the adaptive policy learns while generating: batch costs per level, acceptance per pair of levels.

Both forget old measurements geometrically, so that a level that turns slow (a busy core, a kernel that
fell back) or a draft that stops suiting the text is noticed within a few rounds.
"""

from __future__ import annotations


class BatchCost:
    """Seconds to evaluate (and judge) a batch of n tokens: a decayed mean per batch size.

    A table, not a fitted line: our matmul kernels compute columns in chunks, so the cost is flat within a
    chunk and jumps past it. An unmeasured size is predicted optimistically (cost never falls as n grows):
    as the nearest smaller measured size, or the nearest larger one when only larger sizes are known.
    """

    def __init__(self, decay: float = 0.9):
        self.decay = decay
        self.total: dict[int, float] = {}
        self.count: dict[int, float] = {}
        self._nearest: dict[int, int] = {}  # unmeasured size -> the measured one standing in for it

    def add(self, n: int, seconds: float) -> None:
        if n not in self.count:
            self._nearest.clear()
        self.total[n] = self.total.get(n, 0.0) * self.decay + seconds
        self.count[n] = self.count.get(n, 0.0) * self.decay + 1.0

    @property
    def known(self) -> bool:
        return bool(self.count)

    def cheapest_per_token(self) -> float:
        """The least seconds per token of any measured size: what a long catch-up batch is taken to cost per
        token (a longer batch is no dearer per token on our kernels, so this errs high, not low)."""
        return min(self.total[n] / self.count[n] / n for n in self.count)

    def seconds(self, n: int) -> float:
        if n not in self.count:
            if n not in self._nearest:
                smaller = [m for m in self.count if m < n]
                self._nearest[n] = max(smaller) if smaller else min(self.count)
            n = self._nearest[n]
        return self.total[n] / self.count[n]


class Rate:
    """A decayed ratio of two running sums: seconds per drafted token, or accepted per judged draft."""

    def __init__(self, decay: float):
        self.decay = decay
        self.numerator = 0.0
        self.denominator = 0.0

    def add(self, numerator: float, denominator: float) -> None:
        self.numerator = self.numerator * self.decay + numerator
        self.denominator = self.denominator * self.decay + denominator

    @property
    def known(self) -> bool:
        return self.denominator > 0

    def value(self, prior: float = 0.0, prior_weight: float = 0.0) -> float:
        """The ratio, pulled towards ``prior`` as if ``prior_weight`` more measurements had given it."""
        return (self.numerator + prior * prior_weight) / max(self.denominator + prior_weight, 1e-12)

    def shrink(self, weight: float) -> None:
        """Keep the ratio but count it as at most ``weight`` measurements: a prior for what follows."""
        if self.denominator > weight:
            scale = weight / self.denominator
            self.numerator *= scale
            self.denominator *= scale


class Supply:
    """How many tokens a limited proposer (the n-gram drafter) has when asked: a decayed histogram.

    It returns fewer than asked only where its match ran out, so an answer below the request is its supply
    exactly; one that filled the request says only "at least", and is taken to fill any longer one too
    (optimistic, so that a longer request gets tried and measured).
    """

    def __init__(self, decay: float):
        self.decay = decay
        self.short: dict[int, float] = {}  # supply -> weight, from requests it could not fill
        self.filled = 0.0  # weight of requests it filled

    def add(self, drafted: int, exhausted: bool) -> None:
        for size in self.short:
            self.short[size] *= self.decay
        self.filled *= self.decay
        if exhausted:
            self.short[drafted] = self.short.get(drafted, 0.0) + 1.0
        else:
            self.filled += 1.0

    def shrink(self, weight: float) -> None:
        """Keep the shape of the histogram but count it as at most ``weight`` requests."""
        total = self.filled + sum(self.short.values())
        if total > weight:
            scale = weight / total
            self.short = {size: share * scale for size, share in self.short.items()}
            self.filled *= scale

    def distribution(self, most: int) -> list[float]:
        """P(supply = n) for n < ``most``, and P(supply >= most) last: ``most`` + 1 shares summing to 1."""
        shares = [0.0] * (most + 1)
        shares[most] = self.filled
        for size, share in self.short.items():
            shares[min(size, most)] += share
        total = sum(shares)
        if not total:
            return [0.0] * most + [1.0]
        return [share / total for share in shares]


class RunLength:
    """How many of a limited proposer's tokens a verifier keeps before rejecting one: a decayed histogram of the
    kept runs. A prompt-lookup match is either the text being copied, kept for a long stretch, or a guess that
    fails at once; one acceptance per token, compounded, would price every request as the same mixture.

    A run that ended with the proposal itself (all kept) says only "at least that long"; such censored runs
    count among those still going up to their length, as a Kaplan-Meier estimate takes them.
    """

    def __init__(self, decay: float):
        self.decay = decay
        self.ended: dict[int, float] = {}  # kept -> weight, of runs ended by a rejection
        self.cut: dict[int, float] = {}  # kept -> weight, of runs the proposal's end cut short
        self._lasting: dict[tuple, list[float]] = {}  # worked out, until the next change

    def add(self, kept: int, rejected: bool) -> None:
        self._lasting.clear()
        for table in (self.ended, self.cut):
            for length in table:
                table[length] *= self.decay
        table = self.ended if rejected else self.cut
        table[kept] = table.get(kept, 0.0) + 1.0

    def shrink(self, weight: float) -> None:
        """Keep the histogram's shape but count it as at most ``weight`` runs."""
        total = sum(self.ended.values()) + sum(self.cut.values())
        if total > weight:
            self._lasting.clear()
            scale = weight / total
            self.ended = {length: share * scale for length, share in self.ended.items()}
            self.cut = {length: share * scale for length, share in self.cut.items()}

    def lasting(self, most: int, acceptance: float, prior_weight: float = 1.0) -> list[float]:
        """P(run >= j) for j = 0..``most``: at each length the chance of a rejection among the runs that reached
        it, pulled as if ``prior_weight`` more runs had reached it towards a prior: for the first token
        1 - ``acceptance``, after it the rejections per kept token of the runs under way (a copy that has
        started tends to go on; one acceptance for all would carry the guesses' failures into every long run).
        Past the longest run seen the prior is all there is."""
        key = (most, acceptance, prior_weight)
        if key not in self._lasting:
            later = sum(share for kept, share in self.ended.items() if kept)
            exposure = sum(kept * share for table in (self.ended, self.cut) for kept, share in table.items())
            going_on = later / exposure if exposure > 0 else 1.0 - acceptance
            lasting = [1.0]
            reached = sum(self.ended.values()) + sum(self.cut.values())  # runs of this length or longer
            for length in range(most):
                ended = self.ended.get(length, 0.0)
                prior = (going_on if length else 1.0 - acceptance) * prior_weight
                lasting.append(lasting[-1] * (1.0 - (ended + prior) / (max(reached, 0.0) + prior_weight)))
                reached -= ended + self.cut.get(length, 0.0)
            self._lasting[key] = lasting
        return self._lasting[key]


class AnswerLength:
    """How many tokens a generation produces, for pricing a catch-up against the rest of an answer.

    A generation stopped by its token limit says only that answers run at least that long: it can raise the
    estimate, never lower it (a short warm-up, or a small ``max_tokens``, must not make every later answer look
    short).
    """

    def __init__(self, decay: float):
        self.rate = Rate(decay)

    def add(self, tokens: int, cut: bool) -> None:
        if not cut or (self.rate.known and tokens > self.rate.value()):
            self.rate.add(tokens, 1.0)

    def expected(self, limit: int | None) -> int | None:
        """Tokens the rest of this answer is taken to run: a typical answer's length (not less what it has
        produced: an answer that has run long is no likelier to end soon), at most ``limit``; None when neither
        is known."""
        typical = round(self.rate.value()) if self.rate.known else None
        if limit is None:
            return typical
        return limit if typical is None else max(1, min(limit, typical))
