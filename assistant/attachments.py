"""Files and command output brought into a prompt, as `@path`, `/add`, `/run` in the chat and `-f` in generate.

An attachment is text with a name; it goes into the user's message as a fenced block under its path, so the
model sees where it came from and the n-gram level can copy from it while the answer edits it. Files are read
with the checks a user needs a clear message for (missing, a directory, binary, too large), and remember a
digest so that one changed since it was attached is noticed and re-read."""

from __future__ import annotations

import glob
import hashlib
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from assistant.errors import AssistantError

MAX_FILE_BYTES = 256 * 1024  # a few thousand lines: beyond this a file would crowd the context out
MAX_OUTPUT_CHARS = 64 * 1024  # command output kept (its end, where errors are)
COMMAND_TIMEOUT = 60.0
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
    exit_code: int | None = None  # a command's
    changed: bool = False  # re-read because the file changed since it was attached

    def render(self) -> str:
        """The block the model sees."""
        if self.kind == "command":
            return (f"Output of `{self.name}` (exit code {self.exit_code}):\n```\n{self.content.rstrip()}\n```")
        fence = FENCES.get(Path(self.name).suffix.lower(), "")
        note = " (changed since it was first attached)" if self.changed else ""
        return f"File `{self.name}`{note}:\n```{fence}\n{self.content.rstrip()}\n```"


def read_file(path: str | Path, cwd: str | Path | None = None) -> Attachment:
    """The file at ``path`` (relative to ``cwd``) as an attachment, or an AttachmentError saying why not."""
    cwd = Path(cwd or os.getcwd())
    name = str(path)
    full = _under(cwd, name)
    if not full.exists():
        raise AttachmentError(f"{name}: no such file")
    if full.is_dir():
        raise AttachmentError(f"{name}: is a directory (attach its files, e.g. /add {name.rstrip('/')}/*.py)")
    try:
        size = full.stat().st_size
        if size > MAX_FILE_BYTES:
            raise AttachmentError(f"{name}: {size // 1024} KiB is over the {MAX_FILE_BYTES // 1024} KiB limit for "
                                  "an attachment (attach a smaller part)")
        data = full.read_bytes()
    except OSError as error:
        raise AttachmentError(f"{name}: cannot read ({error.strerror})") from None
    if b"\0" in data[:8192]:
        raise AttachmentError(f"{name}: a binary file, not text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AttachmentError(f"{name}: not UTF-8 text") from None
    return Attachment("file", name, text, hashlib.sha256(data).hexdigest())


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
    """Run ``command`` in a shell; its output (stdout and stderr, the last MAX_OUTPUT_CHARS) and exit code.

    Stops it at ``timeout`` seconds or when ``cancel`` is set, raising AttachmentError: a command that never
    ends must not hang the chat."""
    try:
        process = subprocess.Popen(command, shell=True, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as error:
        raise AttachmentError(f"`{command}`: cannot run ({error.strerror})") from None
    output: list[bytes] = []
    reader = threading.Thread(target=lambda: output.append(process.stdout.read()), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        stopped = "cancelled" if cancel is not None and cancel.is_set() else (
            f"still running after {timeout:g} s" if time.monotonic() > deadline else None)
        if stopped:
            _kill(process)
            raise AttachmentError(f"`{command}`: {stopped}, stopped")
        time.sleep(0.05)
    reader.join(5)
    text = b"".join(output).decode("utf-8", errors="replace")
    if len(text) > MAX_OUTPUT_CHARS:
        text = f"[… {len(text) - MAX_OUTPUT_CHARS} characters cut …]\n" + text[-MAX_OUTPUT_CHARS:]
    return Attachment("command", command, text, exit_code=process.returncode)


def _kill(process: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(process.pid, signal.SIGKILL)  # the shell and whatever it started
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


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
