"""The line under the input: model set and levels, what the engine is doing, speed, acceptance, context, and
the working directory that `@path`, `/add`, `/run` and `/save` are relative to.

Loading shows an indeterminate progress bar, since llama.cpp reports no progress we could forward. The bar
exists only while loading: a hidden one still wakes the screen's thread 15 times a second to animate, and
on a machine whose cores all generate every wake-up is time the model does not get."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.widgets import Label, ProgressBar

from assistant.ui.literal import literal


def describe_stats(stats: dict | None) -> str:
    """Speed, the time to the first token and the acceptance ratio of each level that proposed tokens, e.g.
    "41.2 tok/s · 1st token 0.12 s · α mxfp4 92%"."""
    if not stats:
        return ""
    parts = []
    if stats.get("tokens_per_second"):
        parts.append(f"{stats['tokens_per_second']:.1f} tok/s")
    if stats.get("first_token_seconds"):
        parts.append(f"1st token {stats['first_token_seconds']:.2f} s")
    drafted = [lv for lv in stats.get("levels", []) if lv.get("proposed")]
    if drafted:
        parts.append("α " + " ".join(f"{lv['role']} {lv['acceptance']:.0%}" for lv in drafted))
    return " · ".join(parts)


def describe_context(used: int, size: int, stats: dict | None) -> str:
    """How full the context is and how much of the last prompt came from the cache: "ctx 2871/4096 · 2767 cached"
    says the second question about a long file did not evaluate the file again."""
    cached = (stats or {}).get("cached_tokens")
    return f"ctx {used}/{size}" + (f" · {cached} cached" if cached is not None else "")


def short_path(path: str | Path, width: int = 20) -> str:
    """``path`` with the home directory as ~ and, when still long, only its last parts: "~/src/project"."""
    path = Path(path)
    try:
        text = "~/" + str(path.relative_to(Path.home())) if path != Path.home() else "~"
    except ValueError:
        text = str(path)
    if len(text) <= width:
        return text
    parts = Path(text).parts
    while len(parts) > 1 and len("…/" + "/".join(parts)) > width:
        parts = parts[1:]
    return "…/" + "/".join(parts)


class StatusLine(Horizontal):
    model = reactive("", layout=True)
    state = reactive("", layout=True)
    speed = reactive("", layout=True)
    context = reactive("", layout=True)
    directory = reactive("", layout=True)
    loading = reactive(False)

    def compose(self) -> ComposeResult:
        yield Label(id="status-model")
        yield Label(id="status-state")
        yield Label(id="status-speed")
        yield Label(id="status-context")
        yield Label(id="status-directory")

    def watch_model(self, value: str) -> None:
        self.query_one("#status-model", Label).update(literal(value))

    def watch_state(self, value: str) -> None:
        self.query_one("#status-state", Label).update(literal(value))

    def watch_speed(self, value: str) -> None:
        label = self.query_one("#status-speed", Label)
        label.update(literal(value))
        # A short row (narrow window, chats panel open) once left the speed one cell ("2"): it keeps up to 24,
        # and the context and directory after it are cropped instead. Empty, it takes no room.
        label.styles.min_width = min(len(value), 24)

    def watch_context(self, value: str) -> None:
        self.query_one("#status-context", Label).update(literal(value))

    def watch_directory(self, value: str) -> None:
        self.query_one("#status-directory", Label).update(literal(value))

    def watch_loading(self, value: bool) -> None:
        bars = self.query(ProgressBar)
        if value and not bars:
            bar = ProgressBar(total=None, show_eta=False, show_percentage=False, id="status-progress")
            self.mount(bar, after="#status-model")
        elif not value:
            bars.remove()
