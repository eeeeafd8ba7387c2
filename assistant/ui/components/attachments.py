"""What the chat's next message carries: files named with `@path` or added with `/add`, command output from
`/run` or `!`, until `/drop` takes them out; counted on the attachment bar against the context left.

A path or command that cannot be attached is a notification naming it and saying why. Files are read in a
worker thread: a slow disk or network mount never freezes the window."""

from __future__ import annotations

import fnmatch
import shlex
from pathlib import Path
from typing import Callable, TypeVar

from textual import on
from textual.app import ComposeResult

from assistant.attachments import Attachment, AttachmentError, expand, mentions, read_file
from assistant.conversation import attached_files, backend
from assistant.conversation.store import Store
from assistant.engine.memory import DEFAULT_CTX
from assistant.ui.components.command_runner import CommandRunner
from assistant.ui.components.component import Component
from assistant.ui.components.conversations import Conversations
from assistant.ui.components.model_loader import ModelLoader
from assistant.ui.screens.ask import ConfirmScreen
from assistant.ui.widgets.attachment_bar import AttachmentBar, attachment_line, lines_by_message
from assistant.ui.widgets.message_column import MessageColumn
from assistant.ui.widgets.status_line import short_path

CHARS_PER_TOKEN = 3  # the estimate before the tokenizer has loaded: code runs 3-4 characters a token
Result = TypeVar("Result")


def read_all(patterns: list[str], cwd) -> tuple[list[Attachment], list[str]]:
    """The files the paths and globs name, and why each one that cannot be attached is refused."""
    added, errors = [], []
    for pattern in patterns:
        try:
            names = expand(pattern, cwd)
        except AttachmentError as error:
            errors.append(str(error))
            continue
        for name in names:
            try:
                added.append(read_file(name, cwd))
            except AttachmentError as error:
                errors.append(str(error))
    return added, errors


def line(attachments: list[Attachment]) -> str:
    """The line naming what a message just sent carries."""
    return attachment_line((attachment, False) for attachment in attachments)


class Attachments(Component):
    """Holds what the next message carries in ``pending`` and runs commands with its ``runner``; shows them
    on the ``bar``. Never shown itself."""

    def __init__(self, bar: AttachmentBar, conversations: Conversations, column: MessageColumn,
                 loader: ModelLoader, cwd: Path):
        super().__init__()
        self.bar = bar
        self.conversations = conversations
        self.column = column
        self.loader = loader
        self.cwd = cwd
        self.pending: list[Attachment] = []
        self.runner = CommandRunner()

    def compose(self) -> ComposeResult:
        yield self.runner

    @property
    def store(self) -> Store:
        return self.app.store

    async def off_thread(self, work: Callable[[], Result]) -> Result:
        """``work()`` run in a worker thread while the window stays responsive; what it returns."""
        return await self.run_worker(work, thread=True, group="attach", exit_on_error=False).wait()

    def refuse(self, errors: list[str], title: str = "Not attached") -> None:
        self.notify("\n".join(errors), title=title, severity="error", timeout=10)

    def pend(self, attachment: Attachment) -> None:
        """Add ``attachment`` to the next message, in place of one of the same name."""
        self.pending = [a for a in self.pending if (a.kind, a.name) != (attachment.kind, attachment.name)]
        self.pending.append(attachment)

    async def add(self, argument: str) -> bool:
        """`/add PATH|GLOB ...`: read the files now; a glob's unreadable files are named and left out."""
        try:
            patterns = shlex.split(argument)
        except ValueError as error:
            self.notify(f"/add {argument}: {error}", severity="error")
            return False
        if not patterns:
            self.notify("Usage: /add PATH or /add GLOB, e.g. /add src/*.py", severity="warning")
            return False
        added, errors = await self.off_thread(lambda: read_all(patterns, self.cwd))
        for attachment in added:
            self.pend(attachment)
        self.recount()
        if errors:
            self.refuse(errors)
        if added:
            self.notify("Attached " + ", ".join(a.name for a in added), timeout=3)
        return bool(added)

    def run(self, command_line: str) -> bool:
        """`/run CMD`, `!CMD`: ask first; once confirmed the runner runs it and its output is attached."""
        if not command_line:
            self.notify("Usage: /run CMD or !CMD, e.g. !pytest -x", severity="warning")
            return False
        if self.runner.running:
            self.notify("A command is still running: Esc stops it.", severity="warning")
            return False
        timeout = self.app.settings.command_timeout

        def answered(yes: bool | None) -> None:
            if not yes:
                self.notify("Not run.", timeout=3)
                return
            self.runner.start(command_line, self.cwd, self.app.settings.command_timeout)
            self.notify(f"Running {command_line} (Esc stops it)…", timeout=3)

        self.app.push_screen(ConfirmScreen(
            f"Run this command in {short_path(self.cwd, 60)}?", action="Run", command=command_line,
            note="Its output and exit code go with your next message. Esc stops it while it runs, and it is "
            f"stopped after {timeout:g} s (/timeout changes that)."), answered)
        return True

    @on(CommandRunner.Ran)
    def _ran(self, message: CommandRunner.Ran) -> None:
        if message.error:
            self.refuse([message.error], title="Command not attached")
            return
        attachment = message.attachment
        self.pend(attachment)
        self.recount()
        if attachment.stopped:
            self.notify(f"{attachment.name}: {attachment.stopped}; its output so far is attached (/drop takes it "
                        "out).", severity="warning", timeout=8)
            return
        failed = attachment.exit_code != 0
        self.notify(f"{attachment.name} exited with code {attachment.exit_code}; its output is attached.",
                    severity="warning" if failed else "information", timeout=5)

    def drop(self, argument: str) -> bool:
        """`/drop`: take every attachment out, pending ones and those of earlier messages (the model stops
        seeing them); `/drop PATH` (or a glob) only those of that name."""
        def matches(name: str) -> bool:
            return not argument or name == argument or fnmatch.fnmatchcase(name, argument)

        kept = [a for a in self.pending if not matches(a.name)]
        pending = len(self.pending) - len(kept)
        self.pending = kept
        earlier = 0
        conversation_id = self.conversations.current_id
        if conversation_id is not None:
            stored = self.store.attachments(conversation_id)
            names = [s.attachment.name for s in stored if not s.dropped and matches(s.attachment.name)]
            for name in dict.fromkeys(names):
                earlier += self.store.drop_attachments(conversation_id, name)
            self.column.set_attachment_lines(lines_by_message(self.store.attachments(conversation_id)))
        self.recount()
        if not pending and not earlier:
            self.notify(f"Nothing attached is named {argument}." if argument else "Nothing is attached.",
                        severity="warning")
            return bool(not argument)
        self.notify(f"Dropped {pending} pending and {earlier} earlier attachment{'s' if earlier != 1 else ''}: "
                    "the model no longer sees them.", timeout=4)
        return True

    async def for_message(self, text: str) -> list[Attachment] | None:
        """What a message carries: the pending attachments, the files it names with `@`, and the files of
        earlier turns re-read because they changed. None (with the reasons shown) when an `@` path is refused."""
        cwd, pending = self.cwd, list(self.pending)
        conversation_id = self.conversations.current_id
        earlier = self.store.attachments(conversation_id) if conversation_id is not None else []

        def read() -> tuple[list[Attachment], list[str], list[Attachment], list[str]]:
            mentioned, errors = [], []
            for name in mentions(text, cwd):
                try:
                    mentioned.append(read_file(name, cwd))
                except AttachmentError as error:
                    errors.append(str(error))
            names = {("file", a.name) for a in mentioned}
            files = [a for a in pending if (a.kind, a.name) not in names] + mentioned
            if errors or not earlier:
                return files, errors, [], []
            now = [attached_files.location(cwd, a.name) for a in files if a.kind == "file"]
            return files, errors, *attached_files.changed_files(earlier, cwd, now)

        files, errors, changed, unreadable = await self.off_thread(read)
        if errors:
            self.refuse(errors, title="Not sent")
            return None
        for attachment in changed:
            self.notify(f"{attachment.name} changed since it was attached: re-read.", timeout=4)
        if unreadable:
            self.notify("\n".join(f"{error} (attached earlier: the model keeps the copy it had)"
                                  for error in unreadable), title="Attached file gone", severity="warning", timeout=8)
        return files + changed

    def sent(self) -> None:
        """The pending attachments went with a message: clear the bar."""
        self.pending = []
        self.recount()

    def recount(self) -> None:
        """Count the pending attachments' tokens (with the loaded model's tokenizer, else estimated) and what
        the context has left after the conversation so far and the room kept for the answer."""
        if not self.pending:
            self.bar.show([], [], 0, 0, True)
            return
        settings = self.app.settings
        pipeline = self.loader.pipeline
        if pipeline is not None:
            def count(text: str) -> int:
                return len(pipeline.tokenize(text))
        else:
            def count(text: str) -> int:
                return max(1, len(text) // CHARS_PER_TOKEN)
        tokens = [count(attachment.render()) for attachment in self.pending]
        conversation_id = self.conversations.current_id
        if conversation_id is not None:
            conversation = self.store.conversation(conversation_id)
            prompt = backend.prompt_messages(conversation.system_prompt, self.store.messages(conversation.id),
                                             self.store.attachments(conversation.id), self.cwd)
        else:
            prompt = [{"content": settings.system_prompt}]
        used = sum(count(message["content"]) + backend.TURN_OVERHEAD for message in prompt) + backend.TURN_OVERHEAD
        n_ctx = pipeline.n_ctx if pipeline is not None else settings.n_ctx or DEFAULT_CTX
        self.bar.show(self.pending, tokens, n_ctx - settings.max_tokens - used - sum(tokens), n_ctx,
                      pipeline is not None)
