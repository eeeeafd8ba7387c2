"""Stop strings: text that could still become a stop string is held back until it cannot.

Tokens are released as events once their text is certainly part of the answer; at a stop string the
text before it is released and the rest (the stop string and anything after) is dropped.
"""

from __future__ import annotations


class StopStrings:
    def __init__(self, stops):
        self.stops = [stop for stop in (stops or []) if stop]
        self._pending: list[list] = []  # [token, level, text] whose text may be the start of a stop string

    def push(self, token: int, level: int, text: str) -> tuple[list[tuple[int, int, str]], bool]:
        """Events ready to release, and whether a stop string has now appeared."""
        if not self.stops:
            return [(token, level, text)], False
        pending = self._pending
        pending.append([token, level, text])
        joined = "".join(entry[2] for entry in pending)
        found = min((index for index in (joined.find(stop) for stop in self.stops) if index >= 0), default=-1)
        if found >= 0:
            return self._release_text(found), True
        held = max((_overlap(joined, stop) for stop in self.stops), default=0)
        return self._release_text(len(joined) - held, keep_rest=True), False

    def flush(self) -> list[tuple[int, int, str]]:
        ready = [tuple(entry) for entry in self._pending]
        self._pending = []
        return ready

    def _release_text(self, length: int, keep_rest: bool = False) -> list[tuple[int, int, str]]:
        """Release whole pending tokens covering the first ``length`` characters (the last one cut at a stop)."""
        ready = []
        pending = self._pending
        while pending and length > 0:
            token, level, text = pending[0]
            if len(text) <= length:
                ready.append((token, level, text))
                length -= len(text)
                pending.pop(0)
            elif keep_rest:
                break
            else:
                ready.append((token, level, text[:length]))
                length = 0
                pending.pop(0)
        if not keep_rest:
            self._pending = []
        return ready


def _overlap(text: str, stop: str) -> int:
    """Length of the longest end of ``text`` that is a proper beginning of ``stop``."""
    for size in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:size]):
            return size
    return 0
