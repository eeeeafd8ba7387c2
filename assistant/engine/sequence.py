"""The token list of one generation, which remembers how far back it was cut since each context synced.

Contexts use that "floor" to find what they still share with the list without comparing it all: a
speculative step only ever cuts and extends the tail, so comparing a 4,000-token prefix per decode
would cost more than the decode of a small draft model.
"""

from __future__ import annotations


class TokenSequence:
    def __init__(self, tokens=()):
        self.tokens: list[int] = list(tokens)
        self._floors: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.tokens)

    def append(self, token: int) -> None:
        self.tokens.append(token)

    def extend(self, tokens) -> None:
        self.tokens.extend(tokens)

    def truncate(self, length: int) -> None:
        """Drop every token from ``length`` on."""
        if length < len(self.tokens):
            del self.tokens[length:]
            floors = self._floors
            for key, floor in floors.items():
                if floor > length:
                    floors[key] = length

    def track(self, context) -> None:
        self._floors[id(context)] = len(self.tokens)

    def tracks(self, context) -> bool:
        return id(context) in self._floors

    def floor(self, context) -> int:
        """Tokens unchanged since ``context`` last synced (without restarting the count)."""
        return self._floors[id(context)]

    def take_floor(self, context) -> int:
        """Tokens unchanged since ``context`` last synced; restarts the count from now."""
        key = id(context)
        floor = self._floors[key]
        self._floors[key] = len(self.tokens)
        return floor
