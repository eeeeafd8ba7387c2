"""`/save N PATH`: write code block N of the last answer to a file, once the user has read the diff.

Nothing is written without that confirmation, a new file included; ``assistant.chat.writing`` makes the
diff and writes atomically. A symbolic link is written through to its target, which the question names.
A refusal (no such block, a directory, a file that is not text) is a notification."""

from __future__ import annotations

import shlex

from assistant.chat import writing
from assistant.chat.codeblocks import code_blocks
from assistant.ui.screens.ask import DiffScreen
from assistant.ui.widgets.messages import last_answer
from assistant.ui.widgets.status_line import short_path

USAGE = "Usage: /save N PATH, e.g. /save 1 src/app.py (N counts the last answer's code blocks from 1)"


def save_block(screen, argument: str) -> bool:
    """Show what writing the block would change and write it if the user confirms; False when refused."""
    try:
        words = shlex.split(argument)
    except ValueError:
        words = []
    if len(words) != 2 or not words[0].isdigit():
        screen.notify(USAGE, severity="warning")
        return False
    if screen.busy():
        return False
    number, name = int(words[0]), words[1]
    blocks = code_blocks(last_answer(screen))
    if not 1 <= number <= len(blocks):
        screen.notify(f"The last answer has {len(blocks) or 'no'} code block{'s' if len(blocks) != 1 else ''}"
                      + (f": /save 1 to /save {len(blocks)}" if len(blocks) > 1 else ""), severity="warning")
        return False
    try:
        planned = writing.plan(name, blocks[number - 1].code, screen.cwd)
    except writing.WriteError as error:
        screen.notify(str(error), title="Not saved", severity="error", timeout=10)
        return False
    if planned.old == planned.text:
        screen.notify(f"{name} already holds code block {number}: nothing to write.")
        return True

    def answered(yes: bool | None) -> None:
        if not yes:
            screen.notify(f"Not written: {name} is as it was.", timeout=3)
            return
        try:
            writing.write(planned)
        except writing.WriteError as error:
            screen.notify(str(error), title="Not saved", severity="error", timeout=10)
            return
        screen.notify(f"Wrote code block {number} to {name}" + (f" (to {target})." if planned.link else "."))

    lines = len(planned.text.splitlines())
    target = short_path(planned.path, 80)
    where = f"{name} (a link: its target {target})" if planned.link else name
    question = (f"Create {where} with code block {number} ({lines} lines)?" if planned.old is None else
                f"Write code block {number} over {where}? The change:")
    screen.app.push_screen(DiffScreen(question, planned.diff, "Create" if planned.old is None else "Write"), answered)
    return True
