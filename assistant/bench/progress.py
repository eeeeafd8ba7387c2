"""A one-line progress bar on stderr: steps done, what runs now, time left at the current pace."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, label: str, total: int, enabled: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label, self.total, self.done = label, max(total, 1), 0
        self.started = time.monotonic()

    def step(self, what: str) -> None:
        """Announce the step about to run (the bar counts the steps already finished)."""
        if self.enabled:
            elapsed = time.monotonic() - self.started
            left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
            width = 24
            filled = int(width * self.done / self.total)
            line = (f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                    f"{_clock(elapsed)} elapsed, ~{_clock(left)} left  {what}")
            self.stream.write("\r" + line[:118].ljust(118))
            self.stream.flush()
        self.done += 1

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"
