"""How many tokens each level asks the level below it to draft.

``ConstantLength(k)`` reproduces the paper (k = 8). ``AdaptiveLength`` picks, before each verification,
the k that maximises expected tokens per second under an online cost model: expected tokens from k
drafts at acceptance ratio a is (1 - a^(k+1)) / (1 - a); the cost is the verifier's measured time for a
batch of k+1 tokens (a linear fit over recent batches) plus k times the level below's measured time per
drafted token.
"""

from __future__ import annotations

MAX_DRAFT = 12


class ConstantLength:
    def __init__(self, length: int):
        self.length_value = max(0, int(length))
        self.max_length = max(self.length_value, 1)

    def length(self, level: int) -> int:
        return self.length_value

    def record_verify(self, level: int, batch: int, seconds: float, drafted: int, accepted: int) -> None:
        pass

    def record_draft(self, level: int, tokens: int, seconds: float) -> None:
        pass


class _BatchCost:
    """Seconds to evaluate a batch of n tokens, fitted as a + b*n with exponential forgetting."""

    def __init__(self, decay: float = 0.97):
        self.decay = decay
        self.s0 = self.s1 = self.s2 = self.t0 = self.t1 = 0.0

    def add(self, n: int, seconds: float) -> None:
        d = self.decay
        self.s0 = self.s0 * d + 1.0
        self.s1 = self.s1 * d + n
        self.s2 = self.s2 * d + n * n
        self.t0 = self.t0 * d + seconds
        self.t1 = self.t1 * d + n * seconds

    @property
    def known(self) -> bool:
        return self.s0 > 0

    def seconds(self, n: int) -> float:
        mean_n, mean_t = self.s1 / self.s0, self.t0 / self.s0
        spread = self.s2 / self.s0 - mean_n * mean_n
        if spread > 0.25:
            slope = (self.t1 / self.s0 - mean_n * mean_t) / spread
        else:
            slope = 0.1 * mean_t / max(mean_n, 1.0)  # one batch size seen so far: assume +10% per token
        slope = max(slope, 0.0)
        intercept = max(mean_t - slope * mean_n, 1e-6)
        return intercept + slope * n


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
        self.drafted = [4.0] * n_levels
        self.rounds = [0] * n_levels

    def length(self, level: int) -> int:
        if self.rounds[level] < 3 or self.draft_tokens[level + 1] == 0:
            return self.start_length
        return self._best(level)[0]

    def _best(self, level: int) -> tuple[int, float]:
        """The draft length for ``level`` and the seconds per token it then achieves."""
        acceptance = min(self.accepted[level] / max(self.drafted[level], 1e-9), 0.995)
        per_draft = self._seconds_per_token(level + 1)
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

    def _seconds_per_token(self, level: int) -> float:
        """What one token from ``level`` costs when it drafts at its best length (measured for the last level).

        Predicting this instead of using the measured cost avoids a trap: asked for one token at a time, a
        middle level never uses the level below it, looks expensive, and keeps being asked for one token.
        """
        measured = self.draft_seconds[level] / max(self.draft_tokens[level], 1e-9)
        if level + 1 >= len(self.verify_cost) or not self.verify_cost[level].known or self.draft_tokens[level + 1] == 0:
            return measured
        return min(measured, self._best(level)[1])

    def record_verify(self, level: int, batch: int, seconds: float, drafted: int, accepted: int) -> None:
        self.verify_cost[level].add(batch, seconds)
        if drafted:
            self.accepted[level] = self.accepted[level] * self.decay + accepted
            self.drafted[level] = self.drafted[level] * self.decay + drafted
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
