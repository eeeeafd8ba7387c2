"""A conversation's stored attachments as the model sees them, and the files among them changed since.

Names are kept as the user typed them, relative to the directory the chat ran in then. Seen from another
working directory (a conversation resumed elsewhere) a file goes by its full path, and it is re-read from
where it was attached, so a same-named file in the new directory is never taken for it."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Iterable

from assistant.attachments import Attachment, AttachmentError, refresh
from assistant.conversation.store import StoredAttachment


def location(directory: str | Path, name: str) -> Path:
    """Where a file attachment lives: its name from the directory it was attached in, normalised."""
    return Path(os.path.normpath(os.path.join(directory, os.path.expanduser(name))))


def seen_from(stored: StoredAttachment, cwd: str | Path) -> Attachment:
    """The attachment named as the model should read it from ``cwd``."""
    attachment = stored.attachment
    if attachment.kind != "file" or Path(stored.directory) == Path(cwd):
        return attachment
    return dataclasses.replace(attachment, name=str(location(stored.directory, attachment.name)))


def by_message(attached: Iterable[StoredAttachment], cwd: str | Path) -> dict[int, list[Attachment]]:
    """Each message's attachments still sent to the model (not dropped), as seen from ``cwd``."""
    seen: dict[int, list[Attachment]] = {}
    for stored in attached:
        if not stored.dropped:
            seen.setdefault(stored.message_id, []).append(seen_from(stored, cwd))
    return seen


def note(attached: Iterable[StoredAttachment], cwd: str | Path, left_out: Iterable[StoredAttachment] = ()) -> str:
    """The system prompt's sentence saying where the attached files' paths start from, and one naming what went
    with the turns ``left_out`` to fit the context: the model must not think those are still there.

    The files themselves are named where their contents are, in the turn that attached them: a system prompt
    listing them would change with each file attached, and with the conversation's opening the cache of every
    turn after it would be lost (see docs/ARCHITECTURE.md, "Kept between turns")."""
    present = _files(attached, cwd)
    gone = [attachment for where, attachment in _files(left_out, cwd).items() if where not in present]
    commands = [name for name in _commands(left_out) if name not in _commands(attached)]
    sentences = [working_directory(cwd) if present else ""]
    if gone or commands:
        named = [("the file " if len(gone) == 1 else "the files ") + ", ".join(a.name for a in gone)] if gone else []
        named += [f"the output of `{name}`" for name in commands]
        sentences.append("Older turns were left out to fit the context, and with them " + "; ".join(named)
                         + ": their contents are no longer in the conversation.")
    return " ".join(sentence for sentence in sentences if sentence)


def working_directory(cwd: str | Path) -> str:
    return (f"The user works in {cwd}: the files they attach are in their messages, each under its path "
            "relative to that directory.")


def _commands(attached: Iterable[StoredAttachment]) -> list[str]:
    """The commands whose output is attached and not dropped, each once."""
    return list(dict.fromkeys(s.attachment.name for s in attached if s.attachment.kind == "command" and not s.dropped))


def _files(attached: Iterable[StoredAttachment], cwd: str | Path) -> dict[Path, Attachment]:
    """The file attachments not dropped, one for each place on disk, named as seen from ``cwd``."""
    files = {}
    for stored in attached:
        if stored.attachment.kind == "file" and not stored.dropped:
            files.setdefault(location(stored.directory, stored.attachment.name), seen_from(stored, cwd))
    return files


def changed_files(attached: Iterable[StoredAttachment], cwd: str | Path,
                  attaching_now: Iterable[Path] = ()) -> tuple[list[Attachment], list[str]]:
    """Files attached in earlier turns (the latest copy of each, unless dropped or attached again now) that
    changed since: re-read, marked changed and named as seen from ``cwd``; and why any can no longer be read."""
    latest: dict[Path, StoredAttachment] = {}
    for stored in attached:
        if stored.attachment.kind == "file":
            where = location(stored.directory, stored.attachment.name)
            if stored.dropped:
                latest.pop(where, None)
            else:
                latest[where] = stored
    for where in attaching_now:
        latest.pop(where, None)
    changed, unreadable = [], []
    for stored in latest.values():
        try:
            current = refresh(stored.attachment, stored.directory)
        except AttachmentError as error:
            unreadable.append(str(error))
            continue
        if current is not stored.attachment:
            changed.append(dataclasses.replace(current, name=seen_from(stored, cwd).name))
    return changed, unreadable
