"""Committed pieces of an answer on their way from the generation thread to the screen, and the pace at
which the screen takes them.

The generation only drops its pieces here and goes on; the screen takes them at a reader's pace, slower
when drawing is costly (a long conversation on screen), so that no token waits for a redraw and the
screen's share of the CPU stays small however fast the tokens come: on a machine whose cores all generate,
every redraw is time the model does not get."""

from __future__ import annotations

import threading
import time


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


class RefreshPace:
    """How long the screen waits before its next update: at least ``shortest`` seconds, longer when the CPU
    time its thread spent since the last update (drawing it, mostly) would exceed ``share`` of one core.
    Made and asked on the screen's thread, whose CPU time it reads."""

    def __init__(self, shortest: float, longest: float, share: float):
        self.shortest, self.longest, self.share = shortest, longest, share
        self._cpu = time.thread_time()

    def next_delay(self) -> float:
        cpu = time.thread_time()
        spent, self._cpu = cpu - self._cpu, cpu
        return min(self.longest, max(self.shortest, spent / self.share))
