"""F1: what every key does (as currently mapped), the commands that bring files and command output into a
message, and how to remap a binding by its id."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

from assistant.attachments import MAX_FILE_BYTES, MAX_OUTPUT_BYTES

INTRO = """\
# Help

Type a message and press **Enter** to send it; **Shift+Enter** or **Ctrl+J** starts a new line
(many terminals cannot tell Shift+Enter from Enter). Answers stream in as they are generated and are
saved as they stream. **Ctrl+P** opens the command palette: every action below and the settings
(model set, system prompt, temperature, max tokens, command timeout, speculation and its levels).
"""

OUTRO = """\
## Files and commands as context

Paths are relative to the working directory shown at the end of the status line.

- `@path` in a message attaches that file to it; **Tab** after `@` completes the path.
- `/add PATH` or `/add GLOB` attaches files to your next message, e.g. `/add src/*.py` or `/add a.py b.py`.
- `/run CMD` or `!CMD` runs a shell command once you confirm it with **y** (the dialog shows it exactly as it
  will run, and starts on Cancel: an Enter too many runs nothing) and attaches its output (its last {output_kib} KiB)
  and exit code; **Esc** stops it, and it is stopped after the command timeout, now {timeout:g} s, keeping the
  output so far. `/timeout SECONDS` sets the timeout (saved with the settings), `/timeout` shows it.
- `/drop` takes every attachment out, `/drop PATH` those named PATH: pending ones, and earlier ones the model
  would otherwise see again.
- `/save N PATH` writes code block N of the last answer to PATH once you have seen the diff (or the new file)
  and confirmed.

What your next message will carry is listed above the input with its token count and the context left. Files
attached earlier are read again when they change (the message then says "changed: re-read"); the model is told
which files are attached, and told which were left out when a long conversation no longer fits the context.
Attachments are saved with the conversation. Only regular text files are attached: files over {max_kib} KiB,
binary files, directories, devices, FIFOs and sockets are refused by name.

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
        outro = OUTRO.format(config=self.config_path, timeout=self.app.settings.command_timeout,
                             output_kib=MAX_OUTPUT_BYTES // 1024, max_kib=MAX_FILE_BYTES // 1024)
        text = "\n".join([INTRO, *rows, "", outro])
        with VerticalScroll(classes="dialog-box help-box"):
            yield Markdown(text)
