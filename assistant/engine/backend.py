"""Loads llama_cpp once, settles its CPU backend, initialises llama.cpp and keeps its log off the terminal.

Everything that calls into llama.cpp goes through ``llama()``: importing llama_cpp loads the best CPU backend
for this CPU, and ASSISTANT_CPU_VARIANT may swap it for another only before llama.cpp starts.

llama.cpp prints hundreds of lines per model load to stderr; a chat UI and `--json` output must not
carry them. Error lines are kept (``recent_errors``) so our own one-line messages can quote them;
set ASSISTANT_LLAMA_LOG=1 to see everything.
"""

from __future__ import annotations

import collections
import os

_ready = False
_log_callback = None  # kept alive: llama.cpp holds a pointer to it
_LOG_LEVEL_ERROR = 4  # ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
recent_errors: collections.deque[str] = collections.deque(maxlen=8)


def llama():
    """The llama_cpp bindings module, with the backend initialised."""
    global _ready, _log_callback
    import llama_cpp

    if not _ready:
        from assistant.engine import devices

        if not os.environ.get("ASSISTANT_LLAMA_LOG"):
            _log_callback = llama_cpp.llama_log_callback(_log_errors_only)
            llama_cpp.llama_log_set(_log_callback, None)
        devices.load_backends()
        llama_cpp.llama_backend_init()
        _ready = True
    return llama_cpp


def _log_errors_only(level, text, _user_data):
    if level == _LOG_LEVEL_ERROR and text:
        line = text.decode("utf-8", errors="replace").strip()
        if line:
            recent_errors.append(line)


def last_error() -> str:
    """The first llama.cpp error line since the last call (the most specific one), or ""."""
    line = recent_errors[0] if recent_errors else ""
    recent_errors.clear()
    return line


class NativeHandle:
    """Frees a llama.cpp object with ``close()`` on ``with`` exit or garbage collection, whichever is first."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
