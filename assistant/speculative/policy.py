"""Draft-length policies: before each verification by the target, one plan (plan.py); after it, one record.

``ConstantLength(k)`` is the paper's setting: every level, k drafts each. ``AdaptivePolicy`` runs the shape
its cost model predicts fastest over the rest of the answer, catch-ups included (prediction.py), or one due to
be measured again (exploration.py), with the draft lengths the prediction chose.

``upfront``: the levels whose prompt the chain evaluates before the first round. A fixed pipeline runs all of
its levels from the first round on; the adaptive policy only the target, so a drafter it never plans never
evaluates the prompt, and one it plans catches up on the prompt then, at a price the policy weighed.
"""

from __future__ import annotations

from assistant.speculative.exploration import Explorer
from assistant.speculative.measurements import AnswerLength
from assistant.speculative.plan import Plan, RoundRecord
from assistant.speculative.prediction import MAX_DRAFT, CostModel


def shape_name(roles, shape) -> str:
    return "<-".join(roles[level] for level in shape)


class ConstantLength:
    """Every level of ``shape`` (by default all), each drafting exactly ``length`` tokens for the level above."""

    def __init__(self, length: int, n_levels: int, confidence: float = 0.0, shape: tuple | None = None):
        self.length = max(0, int(length))
        self.max_length = max(self.length, 1)
        self.n_levels = n_levels
        self.confidence = confidence
        self.shape = shape or (tuple(range(n_levels)) if self.length else (0,))
        self.rounds = 0

    @property
    def upfront(self) -> tuple[int, ...]:
        return self.shape

    def wants_rate(self, level: int) -> bool:
        return False

    def begin_generation(self, setting=None) -> None:
        self.rounds = 0

    def plan(self, behind: list[int], remaining: int | None = None, supply: dict | None = None) -> Plan:
        self.rounds += 1
        drafts = (self.length,) * (len(self.shape) - 1)
        return Plan(self.shape, drafts, drafts, self.confidence)

    def record(self, record: RoundRecord) -> None:
        pass

    def report(self, roles) -> dict:
        """Rounds per shape in this generation and each candidate's predicted seconds per token (none here)."""
        return {"shapes": {shape_name(roles, self.shape): self.rounds}, "predicted": {}}


class AdaptivePolicy:
    """Shape and draft lengths per target round, from measured costs and acceptance."""

    def __init__(self, n_levels: int, max_length: int = MAX_DRAFT, start_length: int = 4, decay: float = 0.95,
                 limited=(), confidence: float = 0.0):
        self.n_levels = n_levels
        self.model = CostModel(n_levels, max_length, decay, limited)
        self.explorer = Explorer(n_levels)
        self.max_length = max_length
        self.start_length = start_length  # while some level is not measured yet
        self.confidence = confidence
        self.predicted: dict[tuple, float] = {}  # seconds per target token of every shape, at the last plan
        self.lengths = AnswerLength(decay)
        self.produced = 0  # target tokens of this generation so far
        self.limit = None  # the most this generation may produce, as the last plan was told

    upfront = (0,)

    def wants_rate(self, level: int) -> bool:
        """Whether ``level``'s prompt rate is unknown, so that a slice of the prompt should time it."""
        return not self.model.measured(level) and not self.model.catching[level].known

    def begin_generation(self, setting=None) -> None:
        """``setting``: how the levels choose (greedy, or a sampling setting): acceptance is kept per setting."""
        if self.produced:
            self.lengths.add(self.produced, cut=self.limit is not None and self.produced >= self.limit)
        self.produced, self.limit = 0, None
        self.model.begin_generation(setting)
        self.explorer.begin_generation()

    def plan(self, behind: list[int], remaining: int | None = None, supply: dict | None = None) -> Plan:
        """``behind[i]``: tokens level i has not evaluated yet (what re-joining a shape costs it, its deferred
        prompt included); ``remaining``: the most tokens this generation may still produce (None: no limit
        known); ``supply``: what each limited drafter has to propose right now."""
        if remaining is not None:
            self.limit = self.produced + remaining
        expected = self.lengths.expected(remaining)
        usable = self.explorer.usable(behind, self.model, expected)
        predictions = self.model.predictions(self.explorer.shapes, usable, supply)
        if predictions is not None:
            self.predicted = {shape: seconds for shape, (seconds, _) in predictions.items()}
        shape = self.explorer.next_shape(None if predictions is None else self.predicted, behind, self.model,
                                         expected, usable)
        chosen = predictions[shape][1] if predictions is not None else {}
        lengths = tuple(chosen.get(level, self.start_length) for level in shape[:-1])
        rooms = tuple(self.model.room(level, length) for level, length in zip(shape, lengths))
        stop_below = self.model.stop_threshold(*shape[-2:], self.confidence) if len(shape) > 1 else self.confidence
        return Plan(shape, lengths, rooms, stop_below)

    def record(self, record: RoundRecord) -> None:
        made = sum(batch.accepted + 1 for batch in record.batches if batch.level == 0)  # one batch per round
        self.produced += made
        self.explorer.produced(made)
        self.model.learn(record)
        self.explorer.tried.update((batch.level, batch.drafter) for batch in record.batches
                                   if batch.drafter is not None)

    def report(self, roles) -> dict:
        """Rounds per shape in this generation and each candidate's predicted seconds per target token."""
        return {"shapes": {shape_name(roles, shape): rounds for shape, rounds in self.explorer.used.most_common()},
                "predicted": {shape_name(roles, shape): seconds
                              for shape, seconds in sorted(self.predicted.items(), key=lambda item: item[1])}}


def make_policy(draft_length, n_levels: int, limited=(), confidence: float = 0.0):
    """``limited``: the levels that propose only what they have (the n-gram drafter); ``confidence``: the top
    probability below which the last level stops drafting (the adaptive policy may go lower)."""
    if draft_length == "adaptive":
        return AdaptivePolicy(n_levels, limited=limited, confidence=confidence)
    try:
        return ConstantLength(int(draft_length), n_levels, confidence)
    except (TypeError, ValueError):
        from assistant.errors import AssistantError

        raise AssistantError(f"draft length must be a number or 'adaptive', not {draft_length!r}") from None

