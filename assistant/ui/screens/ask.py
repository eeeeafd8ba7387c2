"""Small modal dialogs: ask for one line of text, or confirm a destructive action."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label


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
            yield Label(self.question, classes="question")
            yield Input(self.value, placeholder=self.placeholder, id="answer")
            yield Label("Enter to confirm, Esc to cancel", classes="hint")

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="dialog.cancel")]

    def __init__(self, question: str, action: str = "Delete"):
        super().__init__(classes="dialog")
        self.question = question
        self.action = action

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Label(self.question, classes="question")
            with Horizontal(classes="buttons"):
                yield Button(self.action, variant="error", id="confirm")
                yield Button("Cancel", id="cancel")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")

    def action_cancel(self) -> None:
        self.dismiss(False)
