"""What a generation gives its consumer: one TokenEvent per accepted token as it comes, then the whole answer
with its Stats, both through one Generation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generator

STOP_REASONS = ("eos", "max_tokens", "stop", "cancelled", "context")


@dataclass(frozen=True)
class Sampling:
    """How each level turns logits into a choice; temperature 0 means greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class TokenEvent:
    token: int
    text: str
    level: int  # index of the level whose model proposed the token (0 = the target's own token)


@dataclass
class LevelStats:
    role: str
    proposed: int = 0  # tokens this level offered to the level above
    accepted: int = 0  # of those, how many the level above kept
    acceptance: float = 0.0  # accepted / proposed
    mean_accepted_length: float = 0.0  # tokens the level above produced per verification of this level's draft
    seconds: float = 0.0  # llama_decode time spent in this level's context


@dataclass
class Stats:
    levels: list[LevelStats] = field(default_factory=list)
    new_tokens: int = 0
    prompt_tokens: int = 0
    seconds: float = 0.0
    tokens_per_second: float = 0.0
    stop_reason: str = "max_tokens"
    shapes: dict[str, int] = field(default_factory=dict)  # chain shape ("target<-draft") -> target rounds in it
    predicted: dict[str, float] = field(default_factory=dict)  # shape -> predicted seconds per token, at the end
    prompt_seconds: float = 0.0  # of ``seconds``: evaluating the prompt, in every level that does, before drafting
    cached_tokens: int = 0  # of ``prompt_tokens``: found in the target's cache (an earlier turn), not evaluated
    first_token_seconds: float = 0.0  # until the first TokenEvent (the whole ``seconds`` when there was none)


class Generation:
    """One answer being generated: iterate it for the TokenEvents as they are accepted; once it has run out it
    holds the whole answer (text, token ids, the level of each, Stats). Every consumer reads these instead of
    sorting a stream of mixed events itself.

    ``events`` yields the TokenEvents and returns the Stats (a generator's return value), so the two never
    share one stream."""

    def __init__(self, events: Generator[TokenEvent, None, Stats]):
        self._events = events
        self.tokens: list[int] = []
        self.levels: list[int] = []  # per token, the level that proposed it
        self.pieces: list[str] = []  # per token, its text
        self.stats: Stats | None = None  # set once the generation has ended

    def __iter__(self) -> "Generation":
        return self

    def __next__(self) -> TokenEvent:
        if self.stats is not None:
            raise StopIteration
        try:
            event = next(self._events)
        except StopIteration as end:
            self.stats = end.value
            raise StopIteration from None
        self.tokens.append(event.token)
        self.levels.append(event.level)
        self.pieces.append(event.text)
        return event

    def finish(self) -> "Generation":
        """Run to the end, for a consumer that wants only the whole answer."""
        for _ in self:
            pass
        return self

    @property
    def text(self) -> str:
        return "".join(self.pieces)
