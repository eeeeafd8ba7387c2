"""One-line progress bars on stderr, shown only on a terminal unless asked for: bytes with their rate, or steps."""

from __future__ import annotations

import sys
import time


class Progress:
    """``show_after``: seconds before the bar first appears (a job that ends sooner shows nothing)."""

    def __init__(self, label: str, total_bytes: int, enabled: bool | None = None, stream=None,
                 show_after: float = 0.0):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.label, self.total, self.done = label, max(total_bytes, 1), 0
        self.started = self.last_shown = time.monotonic()
        self.show_after, self.shown = show_after, False

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        now = time.monotonic()
        if (self.enabled and now - self.started >= self.show_after
                and (now - self.last_shown > 0.2 or self.done >= self.total or not self.shown)):
            self.last_shown, self.shown = now, True
            rate = self.done / max(now - self.started, 1e-9) / 1e6
            width = 30
            filled = int(width * self.done / self.total)
            self.stream.write(
                f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {100 * self.done / self.total:5.1f}% "
                f"{self.done / 1e6:,.0f}/{self.total / 1e6:,.0f} MB {rate:,.0f} MB/s"
            )
            self.stream.flush()

    def moved_to(self, done: int, total: int) -> None:
        """For jobs that report where they are rather than what they added."""
        self.total = max(total, 1)
        self.advance(done - self.done)

    def finish(self) -> float:
        """Seconds since the start; ends the progress line."""
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
        return time.monotonic() - self.started


class Steps:
    """A bar counted in steps rather than bytes (a bench's runs, the candidates of `assistant draft`): what runs
    now and the time left at the current pace."""

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
