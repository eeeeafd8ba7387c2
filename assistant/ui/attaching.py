"""The chat's attachments: `@path` in a message, `/add`, `/run` and `!`, `/drop`, and the bar listing what the
next message carries.

Functions of the chat screen (its store, working directory, attachment bar, command runner), kept out of it.
A path or command that cannot be attached is a notification naming it and saying why; a refused command
goes back into the input, so nothing typed is lost. Files are read in a worker thread: a slow disk or network
mount never freezes the window."""

from __future__ import annotations

import fnmatch
import inspect
import re
import shlex
from typing import Callable, TypeVar

from assistant.attachments import Attachment, AttachmentError, expand, mentions, read_file
from assistant.chat import attached, backend
from assistant.chat.settings import save as save_settings
from assistant.ui import saving, setting_changes
from assistant.ui.screens.ask import ConfirmScreen
from assistant.ui.widgets.attachment_bar import AttachmentBar, attachment_line
from assistant.ui.widgets.command_runner import CommandRunner
from assistant.ui.widgets.messages import MessageView
from assistant.ui.widgets.prompt_input import PromptInput
from assistant.ui.widgets.status_line import short_path

USAGE = "/add PATH|GLOB, /run CMD or !CMD, /drop [PATH], /save N PATH, /timeout [SECONDS]"
CHARS_PER_TOKEN = 3  # the estimate before the tokenizer has loaded: code runs 3-4 characters a token
Result = TypeVar("Result")


async def command(screen, text: str) -> bool:
    """Carry out ``text`` when it is a chat command (True); False leaves it to be sent as a message.
    `/etc/hosts is…` is a message: a command is a slash, a word, then a space or the end."""
    line = text.strip()
    if line.startswith("!"):
        done = run(screen, line[1:].strip())
    else:
        match = re.fullmatch(r"/(\w+)(?:\s+(.*))?", line, re.DOTALL)
        if match is None:
            return False
        name, argument = match.group(1), (match.group(2) or "").strip()
        handlers = {"add": add, "run": run, "drop": drop, "save": saving.save_block, "timeout": timeout}
        if name in handlers:
            done = handlers[name](screen, argument)
            if inspect.isawaitable(done):
                done = await done
        else:
            screen.notify(f"/{name}: no such command (there are {USAGE})", severity="warning")
            done = False
    if not done:
        restore(screen, text)
    return True


def restore(screen, text: str) -> None:
    """Put ``text`` back into the input, to fix and send again."""
    prompt = screen.query_one(PromptInput)
    prompt.text = text
    prompt.move_cursor(prompt.document.end)


async def off_thread(screen, work: Callable[[], Result]) -> Result:
    """``work()`` run in a worker thread while the window stays responsive; what it returns."""
    return await screen.run_worker(work, thread=True, group="attach", exit_on_error=False).wait()


def refuse(screen, errors: list[str], title: str = "Not attached") -> None:
    screen.notify("\n".join(errors), title=title, severity="error", timeout=10)


def pend(screen, attachment: Attachment) -> None:
    """Add ``attachment`` to the next message, in place of one of the same name."""
    bar = screen.query_one(AttachmentBar)
    bar.pending = [a for a in bar.pending if (a.kind, a.name) != (attachment.kind, attachment.name)] + [attachment]


async def add(screen, argument: str) -> bool:
    """`/add PATH|GLOB ...`: read the files now; a glob's unreadable files are named and left out."""
    try:
        patterns = shlex.split(argument)
    except ValueError as error:
        screen.notify(f"/add {argument}: {error}", severity="error")
        return False
    if not patterns:
        screen.notify("Usage: /add PATH or /add GLOB, e.g. /add src/*.py", severity="warning")
        return False
    added, errors = await off_thread(screen, lambda: read_all(patterns, screen.cwd))
    for attachment in added:
        pend(screen, attachment)
    update_bar(screen)
    if errors:
        refuse(screen, errors)
    if added:
        screen.notify("Attached " + ", ".join(a.name for a in added), timeout=3)
    return bool(added)


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


def run(screen, command_line: str) -> bool:
    """`/run CMD`, `!CMD`: ask first; once confirmed the runner runs it and ``ran`` attaches the result."""
    if not command_line:
        screen.notify("Usage: /run CMD or !CMD, e.g. !pytest -x", severity="warning")
        return False
    runner = screen.query_one(CommandRunner)
    if runner.running:
        screen.notify("A command is still running: Esc stops it.", severity="warning")
        return False

    def answered(yes: bool | None) -> None:
        if not yes:
            screen.notify("Not run.", timeout=3)
            return
        runner.start(command_line, screen.cwd, screen.settings.command_timeout)
        screen.notify(f"Running {command_line} (Esc stops it)…", timeout=3)

    screen.app.push_screen(ConfirmScreen(
        f"Run this command in {short_path(screen.cwd, 60)}?", action="Run", command=command_line,
        note="Its output and exit code go with your next message. Esc stops it while it runs, and it is stopped "
        f"after {screen.settings.command_timeout:g} s (/timeout changes that)."), answered)
    return True


def ran(screen, message: CommandRunner.Ran) -> None:
    if message.error:
        refuse(screen, [message.error], title="Command not attached")
        return
    attachment = message.attachment
    pend(screen, attachment)
    update_bar(screen)
    if attachment.stopped:
        screen.notify(f"{attachment.name}: {attachment.stopped}; its output so far is attached (/drop takes it "
                      "out).", severity="warning", timeout=8)
        return
    failed = attachment.exit_code != 0
    screen.notify(f"{attachment.name} exited with code {attachment.exit_code}; its output is attached.",
                  severity="warning" if failed else "information", timeout=5)


def timeout(screen, argument: str) -> bool:
    """`/timeout SECONDS`: how long a command may run before it is stopped, saved with the settings;
    `/timeout` alone says what it is."""
    if not argument:
        screen.notify(f"Commands are stopped after {screen.settings.command_timeout:g} s; /timeout SECONDS "
                      "changes it.", timeout=5)
        return True
    try:
        setting_changes.set_command_timeout(screen, argument)
    except ValueError as error:
        screen.notify(f"/timeout: {error}", severity="error")
        return False
    save_settings(screen.settings)
    screen.notify(f"Commands are now stopped after {screen.settings.command_timeout:g} s.", timeout=4)
    return True


def drop(screen, argument: str) -> bool:
    """`/drop`: take every attachment out, pending ones and those of earlier messages (the model stops
    seeing them); `/drop PATH` (or a glob) only those of that name."""
    def matches(name: str) -> bool:
        return not argument or name == argument or fnmatch.fnmatchcase(name, argument)

    bar = screen.query_one(AttachmentBar)
    kept = [a for a in bar.pending if not matches(a.name)]
    pending = len(bar.pending) - len(kept)
    bar.pending = kept
    earlier = 0
    if screen.conversation is not None:
        stored = screen.store.attachments(screen.conversation.id)
        for name in dict.fromkeys(s.attachment.name for s in stored if not s.dropped and matches(s.attachment.name)):
            earlier += screen.store.drop_attachments(screen.conversation.id, name)
        show_lines(screen)
    update_bar(screen)
    if not pending and not earlier:
        screen.notify(f"Nothing attached is named {argument}." if argument else "Nothing is attached.",
                      severity="warning")
        return bool(not argument)
    screen.notify(f"Dropped {pending} pending and {earlier} earlier attachment{'s' if earlier != 1 else ''}: "
                  "the model no longer sees them.", timeout=4)
    return True


async def for_message(screen, text: str) -> list[Attachment] | None:
    """What a message carries: the pending attachments, the files it names with `@`, and the files of
    earlier turns re-read because they changed. None (with the reasons shown) when an `@` path is refused."""
    cwd, pending = screen.cwd, list(screen.query_one(AttachmentBar).pending)
    earlier = screen.store.attachments(screen.conversation.id) if screen.conversation is not None else []

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
        now = [attached.location(cwd, a.name) for a in files if a.kind == "file"]
        return files, errors, *attached.changed_files(earlier, cwd, now)

    files, errors, changed, unreadable = await off_thread(screen, read)
    if errors:
        refuse(screen, errors, title="Not sent")
        return None
    for attachment in changed:
        screen.notify(f"{attachment.name} changed since it was attached: re-read.", timeout=4)
    if unreadable:
        screen.notify("\n".join(f"{error} (attached earlier: the model keeps the copy it had)" for error in unreadable),
                      title="Attached file gone", severity="warning", timeout=8)
    return files + changed


def sent(screen) -> None:
    """The pending attachments went with a message: clear the bar."""
    screen.query_one(AttachmentBar).pending = []
    update_bar(screen)


def line(attachments: list[Attachment]) -> str:
    return attachment_line((attachment, False) for attachment in attachments)


def lines_by_message(screen, conversation_id: int) -> dict[int, str]:
    """The attachment line under each user message of a saved conversation."""
    grouped: dict[int, list] = {}
    for stored in screen.store.attachments(conversation_id):
        grouped.setdefault(stored.message_id, []).append((stored.attachment, stored.dropped))
    return {message_id: attachment_line(items) for message_id, items in grouped.items()}


def show_lines(screen) -> None:
    """Bring the attachment lines on screen up to date with the store (after /drop)."""
    lines = lines_by_message(screen, screen.conversation.id)
    for view in screen.query(MessageView):
        if view.message_id in lines:
            view.set_attachments(lines[view.message_id])


def update_bar(screen) -> None:
    """Count the pending attachments' tokens (with the loaded model's tokenizer, else estimated) and what
    the context has left after the conversation so far and the room kept for the answer."""
    bar = screen.query_one(AttachmentBar)
    if not bar.pending:
        bar.show([], 0, 0, True)
        return
    pipeline = screen.loader.pipeline
    if pipeline is not None:
        def count(text: str) -> int:
            return len(pipeline.tokenize(text))
    else:
        def count(text: str) -> int:
            return max(1, len(text) // CHARS_PER_TOKEN)
    tokens = [count(attachment.render()) for attachment in bar.pending]
    if screen.conversation is not None:
        conversation = screen.store.conversation(screen.conversation.id)
        prompt = backend.prompt_messages(conversation.system_prompt, screen.store.messages(conversation.id),
                                         screen.store.attachments(conversation.id), screen.cwd)
    else:
        prompt = [{"content": screen.settings.system_prompt}]
    used = sum(count(message["content"]) + backend.TURN_OVERHEAD for message in prompt) + backend.TURN_OVERHEAD
    n_ctx = pipeline.n_ctx if pipeline is not None else screen.settings.n_ctx
    bar.show(tokens, n_ctx - screen.settings.max_tokens - used - sum(tokens), n_ctx, pipeline is not None)
