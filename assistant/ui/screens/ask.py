"""Small modal dialogs: ask for one line of text, confirm a destructive action, or confirm a change to a file
after reading its diff.

Their text names things that are not ours (a conversation's title, a path, a command): shown literally."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from rich.syntax import Syntax
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from assistant.ui.literal import exact, literal, visible


class AskScreen(ModalScreen[str | None]):
    """Returns the entered text, or None when dismissed with Escape."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="dialog.cancel")]

    def __init__(self, question: str, value: str = "", placeholder: str = ""):
        super().__init__(classes="dialog")
        self.question = question
        self.value = value
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Label(literal(self.question), classes="question")
            yield Input(self.value, placeholder=self.placeholder, id="answer")
            yield Label("Enter to confirm, Esc to cancel", classes="hint")

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """Returns True once confirmed: its button, or `y` wherever the focus is (in a diff being read, say).

    The focus starts on Cancel: an Enter pressed once too often (the one that sent `!cmd`, say) cancels."""

    BINDINGS = [Binding("escape,n", "cancel", "Cancel", id="dialog.cancel"),
                Binding("y", "confirm", "Confirm", id="dialog.confirm")]
    AUTO_FOCUS = "#cancel"

    def __init__(self, question: str, action: str = "Delete", command: str | None = None, note: str = ""):
        """``command``: what will run, shown exactly (invisible characters named) in a box of its own; ``note``
        follows it."""
        super().__init__(classes="dialog")
        self.question = question
        self.action = action
        self.command = command
        self.note = note

    box_classes = "dialog-box"

    def compose(self) -> ComposeResult:
        with Vertical(classes=self.box_classes):
            yield Label(literal(self.question), classes="question")
            if self.command is not None:
                with VerticalScroll(classes="command"):
                    yield Static(exact(self.command))
            if self.note:
                yield Label(literal(self.note), classes="note")
            yield from self.details()
            with Horizontal(classes="buttons"):
                yield Button(self.action, variant="error", id="confirm")
                yield Button("Cancel", id="cancel")
            yield Label(f"y: {self.action.lower()}, n or Esc: cancel", classes="hint")

    def details(self) -> ComposeResult:
        """What goes between the question and the buttons: nothing here."""
        return iter(())

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")

    def action_cancel(self) -> None:
        self.dismiss(False)

    def action_confirm(self) -> None:
        self.dismiss(True)


class DiffScreen(ConfirmScreen):
    """A ConfirmScreen showing a unified diff in a scrolling box between the question and the buttons."""

    box_classes = "dialog-box diff-box"
    AUTO_FOCUS = ".diff"  # for reading it with the keys; Enter there does nothing, `y` writes

    def __init__(self, question: str, diff: str, action: str = "Write"):
        super().__init__(question, action)
        self.diff = diff

    def details(self) -> ComposeResult:
        with VerticalScroll(classes="diff"):
            yield Static(Syntax(visible(self.diff), "diff", theme="ansi_dark", word_wrap=True))
