"""How many tokens each level asks the level below it to draft.

``ConstantLength(k)`` reproduces the paper (k = 8). ``AdaptiveLength`` picks, before each verification,
the k that maximises expected tokens per second under an online cost model: expected tokens from k
drafts at per-token acceptance a is (1 - a^(k+1)) / (1 - a); the cost is the verifier's time for a batch
of k+1 tokens plus k times the level below's time per drafted token. The batch time is a table of
measured means per batch size, not a fitted line: our matmul kernels compute columns in chunks (the
BF16 kernel 16, the MXFP4 kernel 8), so the cost is flat within a chunk and jumps past it. A size not
measured yet is predicted as cheap as the nearest smaller measured one (else the nearest larger), so the
policy tries it once. The same model decides, per verification, whether a middle level pays for itself
or the level above should verify the level below it directly (``plan``).
"""

from __future__ import annotations

MAX_DRAFT = 15  # a batch of 16: one column chunk of the BF16 kernel
ROOM_TOLERANCE = 0.05  # a bigger batch counts as "the same price" within this fraction
STOP_SCALE = 2.5  # stop_threshold: confidence needed per unit of (draft token's cost / verification's cost)
EXPLORE_EVERY = 32  # every so many plans a level tries the way (skip the middle level or not) it did not prefer
SKIP_MARGIN = 0.6  # skip a middle level only when that is predicted clearly (40%) faster


class ConstantLength:
    def __init__(self, length: int):
        self.length_value = max(0, int(length))
        self.max_length = max(self.length_value, 1)

    def plan(self, level: int) -> tuple[int, int]:
        """(the level that drafts for ``level``, how many tokens): always the next level, k tokens."""
        return level + 1, self.length_value

    def verify_room(self, level: int, length: int) -> int:
        """The paper's setting: exactly ``length`` drafts per verification."""
        return length

    def stop_threshold(self, level: int, drafter: int, confidence: float) -> float:
        return confidence

    def record_verify(self, level: int, batch: int, seconds: float, drafted: int, accepted: int,
                      drafter: int | None = None) -> None:
        pass

    def record_draft(self, level: int, tokens: int, seconds: float) -> None:
        pass


class _BatchCost:
    """Seconds to evaluate a batch of n tokens: a mean per batch size, forgetting old measurements.

    An unmeasured size is predicted optimistically (cost never falls as n grows): as the nearest smaller
    measured size, or the nearest larger one when only larger sizes are known.
    """

    def __init__(self, decay: float = 0.9):
        self.decay = decay
        self.total: dict[int, float] = {}  # per batch size, decayed sums of seconds and of measurements
        self.count: dict[int, float] = {}

    def add(self, n: int, seconds: float) -> None:
        self.total[n] = self.total.get(n, 0.0) * self.decay + seconds
        self.count[n] = self.count.get(n, 0.0) * self.decay + 1.0

    @property
    def known(self) -> bool:
        return bool(self.count)

    def seconds(self, n: int) -> float:
        if n not in self.count:
            smaller = [m for m in self.count if m < n]
            n = max(smaller) if smaller else min(self.count)
        return self.total[n] / self.count[n]


class AdaptiveLength:
    """Draft length per verifying level from measured costs and the running acceptance ratio."""

    def __init__(self, n_levels: int, max_length: int = MAX_DRAFT, start_length: int = 4, decay: float = 0.95):
        self.max_length = max_length
        self.start_length = start_length
        self.decay = decay
        self.verify_cost = [_BatchCost() for _ in range(n_levels)]
        self.draft_seconds = [0.0] * n_levels  # decayed sums, per drafting level
        self.draft_tokens = [0.0] * n_levels
        self.accepted = [0.7 * 4] * n_levels  # decayed sums, per verifying level; prior a = 0.7
        self.judged = [4.0] * n_levels
        self.skip_accepted = [0.0] * n_levels  # decayed sums for level i judging level i+2's drafts directly
        self.skip_judged = [0.0] * n_levels
        self.rounds = [0] * n_levels
        self.plans = [0] * n_levels

    def plan(self, level: int) -> tuple[int, int]:
        """(the level that drafts for ``level``, how many tokens).

        Normally the next level. A middle level that does not pay for itself (its drafts are good but its
        verification costs more than it saves, as when the small draft already agrees with the target) is
        skipped: ``level`` then verifies the level below it directly, whenever the cost model predicts
        fewer seconds per token that way.
        """
        if self.rounds[level] < 3 or self.draft_tokens[level + 1] == 0:
            return level + 1, self.start_length
        length, seconds = self._best(level, level + 1)
        skip = level + 2
        if skip < len(self.verify_cost) and self.draft_tokens[skip] > 0:
            skip_length, skip_seconds = self._best(level, skip)
            self.plans[level] += 1
            # Now and then the other way, so that its measurements (used only when taken) stay current.
            if (skip_seconds < SKIP_MARGIN * seconds) != (self.plans[level] % EXPLORE_EVERY == 0):
                return skip, skip_length
        return level + 1, length

    def acceptance(self, level: int, drafter: int | None = None) -> float:
        """The chance that ``level`` keeps a token drafted by ``drafter`` (default the next level), given it
        kept the ones before. Before ``level`` has judged the level after next directly, that chance is
        estimated as the smaller of the two steps' acceptances."""
        if drafter is None or drafter == level + 1:
            return min(self.accepted[level] / max(self.judged[level], 1e-9), 0.995)
        if self.skip_judged[level] < 1.0:  # optimistic, so that skipping gets tried and measured
            return min(self.acceptance(level), self.acceptance(level + 1))
        return min(self.skip_accepted[level] / self.skip_judged[level], 0.995)

    def _best(self, level: int, drafter: int | None = None) -> tuple[int, float]:
        """The draft length for ``level`` and the seconds per token it then achieves."""
        drafter = level + 1 if drafter is None else drafter
        acceptance = self.acceptance(level, drafter)
        per_draft = self._seconds_per_token(drafter)
        cost = self.verify_cost[level]
        best_k, best_seconds = 1, float("inf")
        gain = 1.0  # expected tokens for k drafts, built up incrementally
        power = 1.0
        for k in range(1, self.max_length + 1):
            power *= acceptance
            gain += power
            seconds = (cost.seconds(k + 1) + k * per_draft) / gain
            if seconds < best_seconds:
                best_k, best_seconds = k, seconds
        return best_k, best_seconds

    def verify_room(self, level: int, length: int) -> int:
        """How many drafts ``level`` can verify for (about) the price of ``length``: the level below may
        hand up that many when its last round runs past ``length``."""
        cost = self.verify_cost[level]
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
        per_draft = self.draft_seconds[drafter] / max(self.draft_tokens[drafter], 1e-9)
        cost = self.verify_cost[level]
        if not confidence or not cost.known or per_draft <= 0:
            return confidence
        return min(confidence, STOP_SCALE * per_draft / cost.seconds(1))

    def _seconds_per_token(self, level: int) -> float:
        """What one token from ``level`` costs when it drafts at its best length (measured for the last level).

        Predicting this instead of using the measured cost avoids a trap: asked for one token at a time, a
        middle level never uses the level below it, looks expensive, and keeps being asked for one token.
        """
        measured = self.draft_seconds[level] / max(self.draft_tokens[level], 1e-9)
        if level + 1 >= len(self.verify_cost) or not self.verify_cost[level].known or self.draft_tokens[level + 1] == 0:
            return measured
        return min(measured, self._best(level)[1])

    def record_verify(self, level: int, batch: int, seconds: float, drafted: int, accepted: int,
                      drafter: int | None = None) -> None:
        self.verify_cost[level].add(batch, seconds)
        if drafted:
            # Drafts after the first rejected one were never judged: counting them as rejections would
            # make a = 0.9 look like 0.6 at k = 8 and keep k short.
            judged = accepted + (accepted < drafted)
            if drafter is None or drafter == level + 1:
                self.accepted[level] = self.accepted[level] * self.decay + accepted
                self.judged[level] = self.judged[level] * self.decay + judged
            else:
                self.skip_accepted[level] = self.skip_accepted[level] * self.decay + accepted
                self.skip_judged[level] = self.skip_judged[level] * self.decay + judged
        self.rounds[level] += 1

    def record_draft(self, level: int, tokens: int, seconds: float) -> None:
        self.draft_seconds[level] = self.draft_seconds[level] * self.decay + seconds
        self.draft_tokens[level] = self.draft_tokens[level] * self.decay + max(tokens, 1)


def make_policy(draft_length, n_levels: int):
    if draft_length == "adaptive":
        return AdaptiveLength(n_levels)
    try:
        return ConstantLength(int(draft_length))
    except (TypeError, ValueError):
        from assistant.errors import AssistantError

        raise AssistantError(f"draft length must be a number or 'adaptive', not {draft_length!r}") from None
