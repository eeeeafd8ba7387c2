"""What a generation yields: one TokenEvent per accepted token, then exactly one Stats record."""

from __future__ import annotations

from dataclasses import dataclass, field

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
