"""F1: what every key does (as currently mapped) and how to remap a binding by its id."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

INTRO = """\
# Help

Type a message and press **Enter** to send it; **Shift+Enter** or **Ctrl+J** starts a new line
(many terminals cannot tell Shift+Enter from Enter). Answers stream in as they are generated and are
saved as they stream. **Ctrl+P** opens the command palette: every action below and the settings
(model set, system prompt, temperature, max tokens, speculation and its levels).
"""

OUTRO = """\
In the conversation list, **Enter** opens a conversation, **F2** renames it and **Delete** deletes it.

To remap a key, add its binding id to the `"keymap"` object of the `"chat"` section in `{config}`, e.g.
`"keymap": {{"chat.new": "ctrl+t"}}`, and restart.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="help.close"),
        Binding("f1", "dismiss", "Close", show=False, id="help.close_f1"),
    ]

    def __init__(self, bindings: list[Binding], config_path: str):
        super().__init__(classes="dialog")
        self.key_bindings = bindings
        self.config_path = config_path

    def compose(self) -> ComposeResult:
        rows = ["| Key | Action | Binding id |", "| --- | --- | --- |"]
        for binding in self.key_bindings:
            keys = ", ".join(self.app.get_key_display(Binding(key, "")) for key in binding.key.split(","))
            rows.append(f"| {keys} | {binding.description} | `{binding.id}` |")
        text = "\n".join([INTRO, *rows, "", OUTRO.format(config=self.config_path)])
        with VerticalScroll(classes="dialog-box help-box"):
            yield Markdown(text)
