"""Text that is not ours (messages, answers, titles, paths, commands, file and model set names) as the
interface shows it: every character as itself.

Never parsed as markup, since `[/INST]` or `[b]` in a message is text, and a stray closing tag would raise.
Control characters are drawn as visible symbols, since written raw they would drive the terminal (colours,
cursor moves, the window title) instead of being read: C0 ones and DEL as Unicode's control pictures
(ESC as ␛), C1 ones as <U+0085>. Newlines and tabs stay what they are."""

from __future__ import annotations

import unicodedata

from textual.content import Content

KEPT = "\n\t"
PICTURES = {code: chr(0x2400 + code) for code in range(0x20) if chr(code) not in KEPT}
PICTURES[0x7F] = "\u2421"  # ␡
PICTURES.update({code: f"<U+{code:04X}>" for code in range(0x80, 0xA0)})


def visible(text: str) -> str:
    """``text`` with its control characters replaced by visible symbols."""
    return text.translate(PICTURES)


def literal(text: str) -> Content:
    """``text`` as a widget shows it literally (a Label, Static, Option or palette entry takes Content as is)."""
    return Content(visible(text), strip_control_codes=False)


def exact(text: str) -> Content:
    """Like ``literal``, and the invisible format characters (bidirectional overrides, zero-width spaces and
    joiners) named as <U+202E>: what a confirmation shows is what will run, in the order it will run."""
    shown = "".join(f"<U+{ord(char):04X}>" if unicodedata.category(char) == "Cf" else char for char in visible(text))
    return Content(shown, strip_control_codes=False)
