"""Runs one confirmed shell command (`/run`, `!`) in a worker thread and posts ``Ran``.

The window stays usable while it runs; Esc stops it, and so does the chat's command timeout, each keeping
the output so far. Every failure arrives as ``Ran.error``, never as a crash."""

from __future__ import annotations

import threading
from pathlib import Path

from textual import on, work
from textual.message import Message

from assistant.attachments import Attachment, AttachmentError, run_command
from assistant.ui.components.component import Component


class CommandRunner(Component):
    """Never shown."""

    class Ran(Message):
        """The command's output and exit code (None when it was stopped), or why it has none (cannot start)."""

        def __init__(self, command: str, attachment: Attachment | None, error: str | None):
            super().__init__()
            self.command = command
            self.attachment = attachment
            self.error = error

    def __init__(self):
        super().__init__()
        self.running = False
        self.cancel = threading.Event()

    def start(self, command: str, cwd: str | Path, timeout: float) -> None:
        """Run ``command`` in ``cwd``, stopping it after ``timeout`` seconds."""
        self.cancel = threading.Event()
        self.running = True
        self._run(command, cwd, timeout, self.cancel)

    def stop(self) -> bool:
        """Cancel the running command; False when none runs."""
        if self.running:
            self.cancel.set()
        return self.running

    @work(thread=True, group="command")
    def _run(self, command: str, cwd: str | Path, timeout: float, cancel: threading.Event) -> None:
        try:
            attachment, error = run_command(command, cwd, timeout, cancel), None
        except AttachmentError as failure:
            attachment, error = None, str(failure)
        except Exception as failure:  # never let a failure here kill the app
            attachment, error = None, f"`{command}`: unexpected error: {failure!r}"
        self.post_message(self.Ran(command, attachment, error))

    @on(Ran)
    def _ended(self, message: Ran) -> None:
        self.running = False

    def on_unmount(self) -> None:
        self.cancel.set()
