"""`/save N PATH`: write code block N of the last answer to a file, once the user has read the diff.

Nothing is written without that confirmation, a new file included; ``assistant.conversation.writing`` makes the
diff and writes atomically. A symbolic link is written through to its target, which the question names.
A refusal (no such block, a directory, a file that is not text) is a notification."""

from __future__ import annotations

import shlex
from pathlib import Path


from assistant.conversation import writing
from assistant.conversation.codeblocks import code_blocks
from assistant.ui.components.answerer import Answerer
from assistant.ui.components.component import Component
from assistant.ui.screens.ask import DiffScreen
from assistant.ui.widgets.message_column import MessageColumn
from assistant.ui.widgets.status_line import short_path

USAGE = "Usage: /save N PATH, e.g. /save 1 src/app.py (N counts the last answer's code blocks from 1)"


class CodeSaver(Component):
    """Never shown."""

    def __init__(self, column: MessageColumn, answerer: Answerer, cwd: Path):
        super().__init__()
        self.column = column
        self.answerer = answerer
        self.cwd = cwd

    def save(self, argument: str) -> bool:
        """Show what writing the block would change and write it if the user confirms; False when refused."""
        try:
            words = shlex.split(argument)
        except ValueError:
            words = []
        if len(words) != 2 or not words[0].isdigit():
            self.notify(USAGE, severity="warning")
            return False
        if self.answerer.busy():
            return False
        number, name = int(words[0]), words[1]
        blocks = code_blocks(self.column.last_answer)
        if not 1 <= number <= len(blocks):
            self.notify(f"The last answer has {len(blocks) or 'no'} code block{'s' if len(blocks) != 1 else ''}"
                        + (f": /save 1 to /save {len(blocks)}" if len(blocks) > 1 else ""), severity="warning")
            return False
        try:
            planned = writing.plan(name, blocks[number - 1].code, self.cwd)
        except writing.WriteError as error:
            self.notify(str(error), title="Not saved", severity="error", timeout=10)
            return False
        if planned.old == planned.text:
            self.notify(f"{name} already holds code block {number}: nothing to write.")
            return True
        target = short_path(planned.path, 80)

        def answered(yes: bool | None) -> None:
            if not yes:
                self.notify(f"Not written: {name} is as it was.", timeout=3)
                return
            try:
                writing.write(planned)
            except writing.WriteError as error:
                self.notify(str(error), title="Not saved", severity="error", timeout=10)
                return
            self.notify(f"Wrote code block {number} to {name}" + (f" (to {target})." if planned.link else "."))

        lines = len(planned.text.splitlines())
        where = f"{name} (a link: its target {target})" if planned.link else name
        question = (f"Create {where} with code block {number} ({lines} lines)?" if planned.old is None else
                    f"Write code block {number} over {where}? The change:")
        self.app.push_screen(DiffScreen(question, planned.diff, "Create" if planned.old is None else "Write"),
                             answered)
        return True
