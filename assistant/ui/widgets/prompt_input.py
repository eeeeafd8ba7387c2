"""The multi-line message box: Enter sends, Shift+Enter or Ctrl+J inserts a newline, Tab completes `@path`.

Ctrl+J exists because many terminals send the same bytes for Enter and Shift+Enter. Tab completes a path
only in a word that starts with `@`; anywhere else it moves the focus as usual."""

from __future__ import annotations

import os

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from assistant.attachments import completions

NEWLINE_KEYS = ("shift+enter", "ctrl+j")
SHOWN_CHOICES = 8


class PromptInput(TextArea):
    class Submitted(Message):
        def __init__(self, text: str):
            super().__init__()
            self.text = text

    def __init__(self, cwd: str | None = None, **kwargs):
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)
        self.cwd = cwd or os.getcwd()  # where `@` paths are completed from

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            if self.text.strip():
                self.post_message(self.Submitted(self.text))
                self.clear()
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            start, end = self.selection
            self._replace_via_keyboard("\n", start, end)
            return
        if event.key == "tab" and self.complete_path():
            event.stop()
            event.prevent_default()
            return
        await super()._on_key(event)

    def complete_path(self) -> bool:
        """Complete the `@path` word before the cursor as far as it is unambiguous (listing the choices when
        several remain); False when the cursor is not in such a word."""
        row, column = self.cursor_location
        before = self.document.get_line(row)[:column]
        word = before.split()[-1] if before.strip() and not before[-1].isspace() else ""
        if not word.startswith("@"):
            return False
        partial = word[1:]
        found = completions(partial, self.cwd)
        if not found:
            self.notify(f"No file or directory starts with {partial or 'anything here'}.", timeout=3)
            return True
        common = os.path.commonprefix(found)
        if len(found) == 1 and not common.endswith("/"):
            common += " "  # a whole file name: ready for the next word
        if common != partial:
            self.replace(common, (row, column - len(partial)), (row, column), maintain_selection_offset=False)
            self.move_cursor((row, column - len(partial) + len(common)))
        elif len(found) > 1:
            shown = ", ".join(found[:SHOWN_CHOICES]) + (f" and {len(found) - SHOWN_CHOICES} more"
                                                         if len(found) > SHOWN_CHOICES else "")
            self.notify(shown, title="Paths", timeout=5)
        return True
