"""The members of a chain: a model level (one llama.cpp context) or the prompt-lookup n-gram drafter."""

from __future__ import annotations

import numpy as np

from assistant.speculative.events import LevelStats


class ModelLevel:
    """A model and its context; ``scratch`` holds one processed row of its logits at a time."""

    is_model = True

    def __init__(self, role: str, model, context, shares_target_cache: bool = False):
        self.role = role
        self.model = model
        self.context = context
        self.shares_target_cache = shares_target_cache  # same attention geometry: may copy the target's cache
        self.stats = LevelStats(role)
        self.rounds = 0
        self.scratch: np.ndarray | None = None

    def prepare(self, n_shared: int) -> None:
        """Buffers and statistics for one generation."""
        if self.scratch is None or self.scratch.shape[0] != n_shared:
            self.scratch = np.empty(n_shared, dtype=np.float32)
        self.stats = LevelStats(self.role)
        self.rounds = 0


class NgramLevel:
    """Prompt lookup: proposes what followed the latest earlier occurrence of the sequence's last n-gram.

    What followed may run into the sequence's end (text repeating with a short period: a list, a table's rows,
    "0, 0, 0"): the copy then goes on over its own proposal, as a repetition continues, so a period of three
    tokens proposes as many as asked rather than three.

    Its proposals are certain: when sampling, the verifier keeps token t where its own choice is t, which
    happens with probability p(t).
    """

    is_model = False
    role = "ngram"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, capacity: int = 4096):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.tokens = np.zeros(capacity, dtype=np.int64)
        self.length = 0
        self.stats = LevelStats(self.role)
        self.rounds = 0
        self.context = None

    def prepare(self, n_shared: int) -> None:
        self.stats = LevelStats(self.role)
        self.rounds = 0
        self.length = 0

    def propose(self, sequence, count: int) -> list[int]:
        """Up to ``count`` tokens that followed an earlier occurrence of the longest matching suffix."""
        tokens = sequence.tokens
        end = len(tokens)
        if end > self.tokens.shape[0]:
            self.tokens = np.resize(self.tokens, 2 * end)
        # the mirror array only needs the tail that changed since the last look
        start = min(self.length, sequence.take_floor(self)) if sequence.tracks(self) else 0
        sequence.track(self)
        self.tokens[start:end] = tokens[start:end]
        self.length = end
        mirror = self.tokens
        for size in range(min(self.max_ngram, end - 1), self.min_ngram - 1, -1):
            suffix = mirror[end - size : end]
            candidates = np.flatnonzero(mirror[: end - size] == suffix[0])
            for offset in range(1, size):
                if candidates.size == 0:
                    break
                candidates = candidates[mirror[candidates + offset] == suffix[offset]]
            if candidates.size:
                follow = int(candidates[-1]) + size
                proposal = [int(t) for t in mirror[follow : min(follow + count, end)]]
                while len(proposal) < count:  # past the end: the repetition goes on over the proposal itself
                    proposal.append(proposal[follow + len(proposal) - end])
                return proposal
        return []
