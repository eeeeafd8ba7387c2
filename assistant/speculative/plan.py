"""What the chain and its policy exchange each target round: one plan before it, one record after it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Plan:
    """How one verification by the target is drafted.

    ``shape`` is the sub-chain of levels taking part, target first: (0,) the target alone, (0, 2) the target
    verifying the small draft directly. Per verifier (every level of the shape but the last), in shape order:
    ``lengths``, how many drafts it asks of the level below, and ``rooms``, how many it takes when that level's
    last round runs past the length (a batch a little bigger costs about the same). ``stop_below``: the top
    probability under which the last level stops drafting early (greedy only).
    """

    shape: tuple[int, ...]
    lengths: tuple[int, ...] = ()
    rooms: tuple[int, ...] = ()
    stop_below: float = 0.0


@dataclass(frozen=True)
class Batch:
    """A level evaluated ``size`` tokens in ``seconds``; verifying ``drafted`` tokens of ``drafter``, it kept
    ``accepted``; ``exhausted``: a limited drafter (the n-gram level) ran out before filling the request."""

    level: int
    size: int
    seconds: float
    drafter: int | None = None
    drafted: int = 0
    accepted: int = 0
    exhausted: bool = False


@dataclass(frozen=True)
class Drafting:
    """The last level of a shape proposed ``tokens`` on its own in ``seconds`` (catching up excluded)."""

    level: int
    tokens: int
    seconds: float


@dataclass(frozen=True)
class Hindsight:
    """Of what a limited drafter (the n-gram level) had to propose at a round's start, how much the target's
    tokens kept (``accepted`` of ``judged``), in a round where it did not draft for the target: free to judge
    once the round's tokens are known, so that its acceptance follows the text in rounds it sat out too."""

    drafter: int
    accepted: int
    judged: int


@dataclass
class RoundRecord:
    """What one target round measured, in the order it happened."""

    batches: list[Batch] = field(default_factory=list)
    drafts: list[Drafting] = field(default_factory=list)
    hindsight: list[Hindsight] = field(default_factory=list)
