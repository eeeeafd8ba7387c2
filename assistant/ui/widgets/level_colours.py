"""How each speculation level is named and coloured, shared by the answer view, legend and status line."""

from __future__ import annotations

from rich.text import Text

from assistant.ui.literal import visible

# by level index: 0 = target (its corrections and bonus tokens), 1 = first draft, 2 = second draft
COLOURS = ("#f2a65a", "#5fb3f0", "#7fd962", "#d58cf0")
DESCRIPTIONS = {
    "target": "target (corrected or bonus)",
    "mxfp4": "MXFP4 copy (accepted)",
    "draft": "small draft (accepted)",
    "ngram": "n-gram lookup (accepted)",
}


def colour(level: int) -> str:
    return COLOURS[min(level, len(COLOURS) - 1)]


def legend(roles: list[str], stats: dict | None = None) -> Text:
    """One line naming the colour of each level, smallest draft first (the order tokens flow upward); with
    the latest answer's ``stats``, a second line saying which chain shapes answered it and why."""
    text = Text("Speculation view: ", style="bold")
    for level in reversed(range(len(roles))):
        role = roles[level]
        text.append("■ ", style=colour(level))
        text.append(DESCRIPTIONS.get(role, visible(f"{role} (level {level})")))
        if level:
            text.append("   ")
    summary = chain_summary(stats)
    if summary:
        text.append("\n" + summary)
    return text


def chain_summary(stats: dict | None) -> str:
    """"Chain: target<-draft 30 rounds, target 2 · predicted ms/token: target<-draft 21.0, target 50.1"."""
    shapes = (stats or {}).get("shapes") or {}
    if not shapes:
        return ""
    line = "Chain: " + ", ".join(f"{shape} {rounds} rounds" for shape, rounds in shapes.items())
    predicted = (stats or {}).get("predicted") or {}
    if predicted:
        line += " · predicted ms/token: " + ", ".join(f"{shape} {seconds * 1000:.1f}"
                                                      for shape, seconds in list(predicted.items())[:4])
    return line


def coloured(provenance: list[tuple[int, str]]) -> Text:
    """An answer's text with each run coloured by the level that proposed it (its control characters visible)."""
    text = Text()
    for level, piece in provenance:
        text.append(visible(piece), style=colour(level))
    return text
