"""One message in the conversation: the user's text (with a line naming its attachments), an error, or an
answer that can stream.

An answer keeps two renderings, Markdown and the coloured speculation view, and shows one of them. The user's
text and errors are shown literally; an answer is Markdown, its control characters made visible (``literal``)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Markdown, Static

from assistant.ui.literal import literal, visible
from assistant.ui.widgets.level_colours import coloured

ROLE_TITLES = {"user": "You", "assistant": "Assistant", "error": "Error"}


class MessageView(Vertical):
    """A finished, non-streaming message (the user's, or an error from the backend)."""

    def __init__(self, role: str, content: str, message_id: int | None = None, attachments: str = ""):
        super().__init__(classes=f"message {role}")
        self.role = role
        self.content = content
        self.message_id = message_id
        self.attachments = attachments  # a line naming what was attached, e.g. "Attached: app.py (12 lines)"

    def compose(self) -> ComposeResult:
        yield Label(ROLE_TITLES.get(self.role, self.role), classes="role")
        yield Static(literal(self.content), classes="body")
        line = Static(literal(self.attachments), classes="attachments")
        line.display = bool(self.attachments)
        yield line

    def set_attachments(self, line: str) -> None:
        self.attachments = line
        shown = self.query_one(".attachments", Static)
        shown.update(literal(line))
        shown.display = bool(line)


class AnswerView(Vertical):
    """The assistant's answer; ``add_pieces`` appends (level, text) pieces as they are committed."""

    def __init__(self, message_id: int, provenance: list[tuple[int, str]] | None = None,
                 speculation_view: bool = False, note: str = ""):
        super().__init__(classes="message assistant")
        self.message_id = message_id
        self.provenance: list[tuple[int, str]] = list(provenance or [])
        self.speculation_view = speculation_view
        self.note = note

    @property
    def text(self) -> str:
        return "".join(piece for _, piece in self.provenance)

    def compose(self) -> ComposeResult:
        yield Label("Assistant", classes="role")
        markdown = Markdown(visible(self.text), classes="body")
        markdown.display = not self.speculation_view
        yield markdown
        speculation = Static(coloured(self.provenance), classes="body speculation")
        speculation.display = self.speculation_view
        yield speculation
        note = Label(self.note, classes="note")
        note.display = bool(self.note)
        yield note

    def set_speculation_view(self, on: bool) -> None:
        self.speculation_view = on
        self.query_one(Markdown).display = not on
        speculation = self.query_one(".speculation", Static)
        if on:
            speculation.update(coloured(self.provenance))  # kept up to date only while shown
        speculation.display = on

    async def add_pieces(self, pieces: list[tuple[int, str]]) -> None:
        if not pieces:
            return
        for level, text in pieces:
            if self.provenance and self.provenance[-1][0] == level:
                self.provenance[-1] = (level, self.provenance[-1][1] + text)
            else:
                self.provenance.append((level, text))
        # In one batch update the new blocks, the answer's new height and the scroll to the end are drawn once,
        # not once each: every draw is the whole screen, since the scroll moves every line.
        with self.app.batch_update():
            if self.speculation_view:  # colouring the whole answer again: only for the view on screen
                self.query_one(".speculation", Static).update(coloured(self.provenance))
            await self.query_one(Markdown).append(visible("".join(text for _, text in pieces)))

    def set_note(self, note: str) -> None:
        self.note = note
        label = self.query_one(".note", Label)
        label.update(note)
        label.display = bool(note)

