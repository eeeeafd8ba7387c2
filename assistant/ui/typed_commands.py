"""Commands typed into the message box, told apart from messages: `/name argument`, and `!command` for `/run`.

`/etc/hosts is…` is a message: a command is a slash, a word, then a space or the end."""

from __future__ import annotations

import re

USAGE = "/add PATH|GLOB, /run CMD or !CMD, /drop [PATH], /save N PATH, /timeout [SECONDS]"


def parse(text: str) -> tuple[str, str] | None:
    """(name, argument) when ``text`` is a command, e.g. ("run", "pytest -x") for `!pytest -x`; else None."""
    line = text.strip()
    if line.startswith("!"):
        return "run", line[1:].strip()
    match = re.fullmatch(r"/(\w+)(?:\s+(.*))?", line, re.DOTALL)
    if match is None:
        return None
    return match.group(1), (match.group(2) or "").strip()
