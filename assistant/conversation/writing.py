"""Writing an answer's code block to a file: the diff the user reviews first, then an atomic replace.

The chat writes only after the user confirmed what ``plan`` showed. The text goes to a temporary name beside
the file, is flushed to disk and renamed over it, so an interrupted write or a crash never leaves half a file,
and a file that changed after the diff was shown is not overwritten. A symbolic link is written through, as
editors do: its target gets the text and the link stays a link."""

from __future__ import annotations

import difflib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from assistant.errors import AssistantError


class WriteError(AssistantError):
    """A file that cannot be written as asked; the message names it and says why."""


@dataclass(frozen=True)
class PlannedWrite:
    name: str  # as the user typed it
    path: Path  # the file written: where a symbolic link named ``name`` leads
    text: str
    old: str | None  # the file's text now; None for a new file
    link: Path | None = None  # the symbolic link written through, when ``name`` is one

    @property
    def diff(self) -> str:
        """A unified diff from the file as it is (or nothing, for a new file) to ``text``."""
        lines = difflib.unified_diff(_lines(self.old or ""), _lines(self.text),
                                     "/dev/null" if self.old is None else f"a/{self.name}", f"b/{self.name}")
        return "".join(lines)


def _lines(text: str) -> list[str]:
    return [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
            for line in text.splitlines(keepends=True)]


def _current(path: Path, name: str) -> str | None:
    if not path.exists():
        return None
    try:
        data = path.read_bytes()
    except OSError as error:
        raise WriteError(f"{name}: cannot read ({error.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise WriteError(f"{name}: not a UTF-8 text file, not replacing it") from None


def plan(name: str, text: str, cwd: str | Path) -> PlannedWrite:
    """What writing ``text`` to ``name`` (relative to ``cwd``) would change, or a WriteError saying why not."""
    path = Path(cwd) / os.path.expanduser(name)
    link = path if path.is_symlink() else None
    if link is not None:
        path = Path(os.path.realpath(path))  # a dangling link's target is created, as editors do
    if path.is_dir():
        raise WriteError(f"{name}: is a directory; give a file name")
    if not path.parent.is_dir():
        raise WriteError(f"{name}: no such directory {path.parent}")
    if path.exists() and not path.is_file():
        raise WriteError(f"{name}: not a regular file, not replacing it")
    return PlannedWrite(name, path, text, _current(path, name), link)


def write(planned: PlannedWrite) -> None:
    """Replace the file with the planned text atomically and durably, keeping its permissions."""
    if _current(planned.path, planned.name) != planned.old:
        raise WriteError(f"{planned.name}: changed since the diff was shown; not written, save it again")
    mode = planned.path.stat().st_mode & 0o7777 if planned.old is not None else None
    temporary = planned.path.with_name(f".{planned.path.name}.{secrets.token_hex(4)}.part")
    try:
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as usual
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(planned.text)
                file.flush()
                if mode is not None:
                    os.fchmod(file.fileno(), mode)
                os.fsync(file.fileno())  # the text is on disk before the name points at it
            os.replace(temporary, planned.path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        _sync_directory(planned.path.parent)
    except OSError as error:
        raise WriteError(f"{planned.name}: cannot write ({error.strerror})") from None


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable; a file system that cannot sync a directory is left as it is."""
    try:
        handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)
