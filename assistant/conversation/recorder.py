"""Turns the pipeline's token stream into a saved answer: each piece is committed before it is shown.

The UI only ever displays what ``flush`` returned, so a kill -9 at any moment loses nothing on screen."""

from __future__ import annotations

import dataclasses
import time

from assistant.conversation.store import Store


def stats_dict(stats) -> dict:
    """The pipeline's ``Stats`` as plain JSON-able data, as stored with the answer."""
    if dataclasses.is_dataclass(stats):
        return dataclasses.asdict(stats)
    return dict(vars(stats))


class AnswerRecorder:
    def __init__(self, store: Store, message_id: int, interval: float = 0.05):
        self.store = store
        self.message_id = message_id
        self.interval = interval  # seconds between commits: bounds UI refreshes and disk writes
        self.text = ""
        self.provenance: list[tuple[int, str]] = []  # runs of (level, text), merged while the level repeats
        self._pending: list[tuple[int, str]] = []
        self._last_flush = time.monotonic()

    def add(self, level: int, text: str) -> list[tuple[int, str]] | None:
        """Record one token; returns the pieces to show when it is time to flush, else None."""
        self._pending.append((level, text))
        if time.monotonic() - self._last_flush >= self.interval:
            return self.flush()
        return None

    def flush(self, stats: dict | None = None, complete: bool = False) -> list[tuple[int, str]]:
        """Commit everything received so far; returns the pieces not shown yet."""
        pieces, self._pending = self._pending, []
        for level, text in pieces:
            self.text += text
            if self.provenance and self.provenance[-1][0] == level:
                self.provenance[-1] = (level, self.provenance[-1][1] + text)
            else:
                self.provenance.append((level, text))
        self.store.update_answer(self.message_id, self.text, self.provenance, stats, complete)
        self._last_flush = time.monotonic()
        return pieces
