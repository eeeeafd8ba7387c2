"""Committed pieces of an answer on their way from the generation thread to the screen.

The generation only drops its pieces here and goes on; the screen takes them at a reader's pace
(``Answerer.REFRESH_SECONDS``), so no token waits for a redraw and a fast model costs no more redraws
than a slow one."""

from __future__ import annotations

import threading


class AnswerFeed:
    def __init__(self):
        self._lock = threading.Lock()
        self._pieces: list[tuple[int, str]] = []

    def put(self, pieces: list[tuple[int, str]]) -> None:
        """Called by the generation thread; never waits for the screen."""
        with self._lock:
            self._pieces.extend(pieces)

    def take(self) -> list[tuple[int, str]]:
        """Every piece put since the last take, in order."""
        with self._lock:
            pieces, self._pieces = self._pieces, []
        return pieces
