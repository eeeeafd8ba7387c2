"""How each speculation level is named and coloured, shared by the answer view, legend and status line."""

from __future__ import annotations

from rich.text import Text

# by level index: 0 = target (its corrections and bonus tokens), 1 = first draft, 2 = second draft
COLOURS = ("#f2a65a", "#5fb3f0", "#7fd962", "#d58cf0")
DESCRIPTIONS = {
    "target": "target (corrected or bonus)",
    "mxfp4": "MXFP4 copy (accepted)",
    "draft": "small draft (accepted)",
}


def colour(level: int) -> str:
    return COLOURS[min(level, len(COLOURS) - 1)]


def legend(roles: list[str]) -> Text:
    """One line naming the colour of each level, smallest draft first (the order tokens flow upward)."""
    text = Text("Speculation view: ", style="bold")
    for level in reversed(range(len(roles))):
        role = roles[level]
        text.append("■ ", style=colour(level))
        text.append(DESCRIPTIONS.get(role, f"{role} (level {level})"))
        if level:
            text.append("   ")
    return text


def coloured(provenance: list[tuple[int, str]]) -> Text:
    """An answer's text with each run coloured by the level that proposed it."""
    text = Text()
    for level, piece in provenance:
        text.append(piece, style=colour(level))
    return text
