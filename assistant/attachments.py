"""Files and command output brought into a prompt, as `@path`, `/add`, `/run` in the chat and `-f` in generate.

An attachment is text with a name; it goes into the user's message as a fenced block under its path, so the
model sees where it came from and the n-gram level can copy from it while the answer edits it. Files are read
with the checks a user needs a clear message for (missing, not a regular file, binary, too large), and remember
a digest so that one changed since it was attached is noticed and re-read. Nothing here can hang or exhaust the
chat: only regular files are opened, their size is checked before reading, and a command's output is kept
only as far as it is used."""

from __future__ import annotations

import glob
import hashlib
import os
import re
import selectors
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from assistant.errors import AssistantError

MAX_FILE_BYTES = 256 * 1024  # a few thousand lines: beyond this a file would crowd the context out
MAX_OUTPUT_BYTES = 64 * 1024  # command output kept (its end, where errors are)
COMMAND_TIMEOUT = 60.0  # seconds, unless the chat's settings say otherwise
STOP_GRACE = 0.5  # seconds a stopped command's processes get to exit on SIGTERM before SIGKILL
FENCES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".c": "c", ".h": "c", ".cpp": "cpp",
          ".hpp": "cpp", ".rs": "rust", ".go": "go", ".java": "java", ".sh": "sh", ".md": "markdown",
          ".json": "json", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".html": "html", ".css": "css",
          ".sql": "sql", ".rb": "ruby", ".kt": "kotlin", ".swift": "swift", ".cs": "csharp", ".txt": ""}
TEXT_SUFFIXES = set(FENCES) | {".cfg", ".ini", ".xml", ".csv", ".log", ".rst", ".lock", ".env", ".in", ".tsx", ".jsx"}
MENTION = re.compile(r"(?<![\w@])@([^\s`'\"()\[\]{}<>,;]+)")  # not in an e-mail address, not a call's brackets


class AttachmentError(AssistantError):
    """A path or command that cannot be attached; the message names it and says why."""


@dataclass(frozen=True)
class Attachment:
    kind: str  # "file" or "command"
    name: str  # the path as the user wrote it (relative to the working directory) or the command
    content: str
    digest: str = ""  # of a file's bytes when read: tells a later read whether it changed
    exit_code: int | None = None  # a command's; None for one stopped before it exited
    changed: bool = False  # re-read because the file changed since it was attached

    @property
    def stopped(self) -> str:
        """Why a command was stopped before it exited (its output's last line says so); "" otherwise."""
        if self.kind != "command" or self.exit_code is not None:
            return ""
        return self.content.rstrip("\n").rpartition("\n")[2].strip("[]")

    def render(self) -> str:
        """The block the model sees."""
        if self.kind == "command":
            ended = f"exit code {self.exit_code}" if self.exit_code is not None else "stopped before it exited"
            return f"Output of `{self.name}` ({ended}):\n```\n{self.content.rstrip()}\n```"
        fence = FENCES.get(Path(self.name).suffix.lower(), "")
        note = " (changed since it was first attached)" if self.changed else ""
        return f"File `{self.name}`{note}:\n```{fence}\n{self.content.rstrip()}\n```"


def read_file(path: str | Path, cwd: str | Path | None = None, limit: int = MAX_FILE_BYTES) -> Attachment:
    """The file at ``path`` (relative to ``cwd``) as an attachment, or an AttachmentError saying why not.

    Only a regular file is read, and only once its size is known to be under ``limit``: a FIFO, a device or
    a socket could block or never end, and a huge file would be read whole for nothing."""
    cwd = Path(cwd or os.getcwd())
    name = str(path)
    full = _under(cwd, name)
    try:
        kind = _not_regular(os.stat(full).st_mode)  # looked at before opening: opening a FIFO waits for a writer
        if kind == "a directory":
            raise AttachmentError(f"{name}: is a directory (attach its files, e.g. /add {name.rstrip('/')}/*.py)")
        if kind:
            raise AttachmentError(f"{name}: is {kind}, not a regular file")
        descriptor = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise AttachmentError(f"{name}: no such file") from None
    except OSError as error:
        raise AttachmentError(f"{name}: cannot read ({error.strerror})") from None
    with os.fdopen(descriptor, "rb") as file:
        try:
            status = os.fstat(file.fileno())  # what was opened, should the path have changed meanwhile
            kind = _not_regular(status.st_mode)
            if kind:
                raise AttachmentError(f"{name}: is {kind}, not a regular file")
            if status.st_size > limit:
                raise AttachmentError(f"{name}: {_size(status.st_size)} is over the {_size(limit)} limit for "
                                      "an attachment (attach a smaller part)")
            data = file.read(limit + 1)  # a file growing as it is read stops at the limit too
        except OSError as error:
            raise AttachmentError(f"{name}: cannot read ({error.strerror})") from None
    if len(data) > limit:
        raise AttachmentError(f"{name}: grew over the {_size(limit)} limit for an attachment while being read")
    if b"\0" in data[:8192]:
        raise AttachmentError(f"{name}: a binary file, not text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AttachmentError(f"{name}: not UTF-8 text") from None
    return Attachment("file", name, text, hashlib.sha256(data).hexdigest())


def _not_regular(mode: int) -> str:
    """What a file of this mode is when it is not a regular file ("a FIFO", ...); "" for a regular file."""
    kinds = [(stat.S_ISREG, ""), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def _size(size: int) -> str:
    return f"{size // (1024 * 1024)} MiB" if size >= 16 * 1024 * 1024 else f"{size // 1024} KiB"


def _under(cwd: Path, name: str) -> Path:
    """``name`` from ``cwd``, with `~` expanded (an unknown `~user` stays as written)."""
    try:
        return cwd / Path(name).expanduser()
    except RuntimeError:
        return cwd / name


def expand(pattern: str, cwd: str | Path | None = None) -> list[str]:
    """Paths (relative to ``cwd``, sorted) that a `/add` argument names: a path, or a glob like `src/*.py`."""
    cwd = Path(cwd or os.getcwd())
    if not glob.has_magic(pattern):
        return [pattern]
    matches = sorted(glob.glob(pattern, root_dir=cwd, recursive=True))
    files = [match for match in matches if (cwd / match).is_file()]
    if not files:
        raise AttachmentError(f"{pattern}: matches no file")
    return files


def refresh(attachment: Attachment, cwd: str | Path | None = None) -> Attachment:
    """A file attachment as the file is now: the same object if unchanged, re-read and marked if it changed.
    A file that is gone or unreadable now raises AttachmentError."""
    if attachment.kind != "file":
        return attachment
    current = read_file(attachment.name, cwd)
    if current.digest == attachment.digest:
        return attachment
    return Attachment("file", current.name, current.content, current.digest, changed=True)


def run_command(command: str, cwd: str | Path | None = None, timeout: float = COMMAND_TIMEOUT,
                cancel: threading.Event | None = None) -> Attachment:
    """Run ``command`` in a shell; its output (stdout and stderr, the last MAX_OUTPUT_BYTES) and exit code.

    The output is cut as it streams, so a command that prints without end costs no more memory than one
    that prints a page. At ``timeout`` seconds or when ``cancel`` is set the command is stopped: the output
    so far is kept, with a last line saying why, and the exit code is None. The command runs in a process
    group of its own that is ended as a whole once the shell is done or stopped: a background child that
    holds the output pipe open never outlives it."""
    try:
        process = subprocess.Popen(command, shell=True, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as error:
        raise AttachmentError(f"`{command}`: cannot run ({error.strerror})") from None
    output = OutputTail(MAX_OUTPUT_BYTES)
    began = time.monotonic()
    stopped = ""
    with process.stdout, selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        ended = False  # the pipe's end: every process that could write has closed it
        while not _exited(process):
            if cancel is not None and cancel.is_set():
                stopped = f"stopped by the user after {time.monotonic() - began:.1f} s"
                break
            if time.monotonic() - began > timeout:
                stopped = f"timed out: still running after {timeout:g} s, stopped"
                break
            if ended:
                time.sleep(0.05)
            elif selector.select(0.05):
                ended = not output.read(process.stdout.fileno())
        _end_group(process)
        deadline = time.monotonic() + 4 * STOP_GRACE  # a process that left the group may hold the pipe forever
        while not ended and time.monotonic() < deadline and selector.select(STOP_GRACE):
            ended = not output.read(process.stdout.fileno())  # what was written before the group ended
    text = output.text()
    if stopped:
        ending = "" if not text or text.endswith("\n") else "\n"
        return Attachment("command", command, f"{text}{ending}[{stopped}]\n")
    return Attachment("command", command, text, exit_code=process.returncode)


class OutputTail:
    """The last ``limit`` bytes of a stream and how many came before them."""

    def __init__(self, limit: int):
        self.limit = limit
        self.kept = bytearray()
        self.cut = 0

    def read(self, descriptor: int) -> bool:
        """Read what is there; False at the end of the stream."""
        chunk = os.read(descriptor, 1 << 16)
        self.kept += chunk
        if len(self.kept) > 2 * self.limit:  # trimmed now and then, not at every read
            self.cut += len(self.kept) - self.limit
            del self.kept[:-self.limit]
        return bool(chunk)

    def text(self) -> str:
        kept = bytes(self.kept[-self.limit:])
        cut = self.cut + len(self.kept) - len(kept)
        if not cut:
            return kept.decode("utf-8", errors="replace")
        start = next((i for i, byte in enumerate(kept[:4]) if byte & 0xC0 != 0x80), 0)  # not mid-character
        return f"[… the first {cut + start} bytes cut …]\n" + kept[start:].decode("utf-8", errors="replace")


def _exited(process: subprocess.Popen) -> bool:
    """Whether the shell has exited, leaving it unreaped where the system allows, so that its process group id
    cannot be taken by another process before the group is ended."""
    if not hasattr(os, "waitid"):  # not on every platform
        return process.poll() is not None
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # already reaped
        return True


def _end_group(process: subprocess.Popen) -> None:
    """End the shell and everything it started: SIGTERM, a moment to exit, then SIGKILL for what is left."""
    _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline:
        process.poll()  # reaps the shell once it exits, so that only the living keep the group
        if not _signal_group(process, 0):
            break
        time.sleep(0.02)
    _signal_group(process, signal.SIGKILL)
    process.wait()


def _signal_group(process: subprocess.Popen, number: int) -> bool:
    """Send ``number`` to the command's process group; False when no process is left in it."""
    try:
        os.killpg(process.pid, number)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def with_attachments(text: str, attachments: list[Attachment]) -> str:
    """The user's message as the model sees it: the attachments' blocks, then what the user wrote."""
    if not attachments:
        return text
    return "\n\n".join([attachment.render() for attachment in attachments] + [text])


def system_note(attachments: list[Attachment], cwd: str | Path | None = None) -> str:
    """A line for the system prompt: which files are attached and where they live."""
    files = [attachment.name for attachment in attachments if attachment.kind == "file"]
    if not files:
        return ""
    return (f"The user works in {Path(cwd or os.getcwd())} and attached these files (paths relative to it): "
            + ", ".join(files) + ". Their contents are in the user's message.")


def system_messages(system_prompt: str | None, note: str) -> list[dict]:
    """The system turn that goes before the conversation: the user's system prompt, then the note naming the
    attached files; none when both are empty (a blank system prompt counts as none)."""
    content = "\n\n".join(part for part in (system_prompt, note) if part and part.strip())
    return [{"role": "system", "content": content}] if content else []


def mentions(text: str, cwd: str | Path | None = None) -> list[str]:
    """The paths a chat message attaches with `@`, e.g. "explain @src/app.py." gives ["src/app.py"].

    A word after `@` is a path when something exists there (a directory too, so that it is refused by name)
    or when it looks like one (a `/` or a known text suffix); a decorator such as `@property` or
    `@pytest.mark.parametrize` stays text."""
    cwd = Path(cwd or os.getcwd())
    found: list[str] = []
    for match in MENTION.finditer(text):
        word = match.group(1)
        bare = word.rstrip(".:!?")  # a sentence's full stop after the path
        for name in (word, bare):
            if name and _under(cwd, name).exists():
                break
        else:
            name = bare if ("/" in bare or Path(bare).suffix.lower() in TEXT_SUFFIXES) else ""
        if name and name not in found:
            found.append(name)
    return found


def completions(partial: str, cwd: str | Path | None = None) -> list[str]:
    """Paths (relative as typed, directories ending in "/") that complete ``partial``, for Tab after `@`.
    Hidden entries only when ``partial`` names one with its leading dot."""
    cwd = Path(cwd or os.getcwd())
    head, slash, prefix = partial.rpartition("/")
    folder = _under(cwd, head + slash) if slash else cwd
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return []
    found = []
    for entry in entries:
        if not entry.name.startswith(prefix) or (entry.name.startswith(".") and not prefix.startswith(".")):
            continue
        name = head + slash + entry.name
        found.append(name + "/" if entry.is_dir() else name)
    return found
