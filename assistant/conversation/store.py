"""Conversations and messages in one SQLite file (WAL mode), committed as they happen.

Every write commits at once: the user's message before generation starts, the answer each time a piece
of it is shown, so killing the process loses nothing that was on screen. One ``Store`` per thread."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from assistant import home
from assistant.attachments import Attachment
from assistant.conversation.migrations import migrate
from assistant.errors import AssistantError

TITLE_LENGTH = 48
DEFAULT_TITLE = "New chat"


@dataclass
class Conversation:
    id: int
    title: str
    system_prompt: str = ""
    model_set: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass
class Message:
    id: int
    conversation_id: int
    role: str  # "user", "assistant" or "error" (shown, never sent to the model)
    content: str
    provenance: list[tuple[int, str]] = field(default_factory=list)  # runs of (level, text) of an answer
    stats: dict | None = None
    complete: bool = True
    created_at: float = 0.0


@dataclass(frozen=True)
class StoredAttachment:
    """A user message's attachment, with the working directory its name is relative to."""

    message_id: int
    directory: str
    attachment: Attachment
    dropped: bool = False  # taken out with /drop: no longer sent to the model


def title_from(text: str) -> str:
    """A conversation's title from its first message: the first non-empty line, shortened."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "") or DEFAULT_TITLE
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


def _create_private(path: Path) -> None:
    """The database holds attached files and command output: readable by its owner only. SQLite gives its
    -wal and -shm files the database's mode, so creating the file empty with 0600 is enough (an empty file
    is an empty database); older ones are tightened."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, home.PRIVATE_FILE))
    except FileExistsError:
        home.make_private(path, home.PRIVATE_FILE)
        for side in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if side.exists():
                home.make_private(side, home.PRIVATE_FILE, say=False)  # the database's note covers them
    except OSError:
        pass  # a directory we cannot write to: sqlite3 says so below


class Store:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else home.database_path()
        _create_private(self.path)
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None, timeout=10, check_same_thread=False)
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")  # in WAL mode still durable against process kills
            self.db.execute("PRAGMA foreign_keys=ON")
            migrate(self.db)
        except sqlite3.Error as error:
            raise AssistantError(f"{self.path}: cannot open the conversation database ({error})") from None

    def close(self) -> None:
        self.db.close()

    # conversations

    def new_conversation(self, title: str = DEFAULT_TITLE, system_prompt: str = "", model_set: str | None = None) -> Conversation:
        now = time.time()
        cursor = self.db.execute(
            "INSERT INTO conversations (title, system_prompt, model_set, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
            (title, system_prompt, model_set, now, now),
        )
        return self.conversation(cursor.lastrowid)

    def conversation(self, conversation_id: int) -> Conversation:
        row = self.db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            raise AssistantError(f"no conversation with id {conversation_id} in {self.path}")
        return Conversation(**dict(row))

    def conversations(self, search: str = "") -> list[Conversation]:
        """Most recently used first; ``search`` matches titles and message text, case-insensitively."""
        if not search.strip():
            rows = self.db.execute("SELECT * FROM conversations ORDER BY updated_at DESC, id DESC")
        else:
            pattern = "%" + search.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self.db.execute(
                "SELECT * FROM conversations c WHERE c.title LIKE :p ESCAPE '\\' OR EXISTS ("
                " SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.content LIKE :p ESCAPE '\\')"
                " ORDER BY updated_at DESC, id DESC",
                {"p": pattern},
            )
        return [Conversation(**dict(row)) for row in rows]

    def latest_conversation(self) -> Conversation | None:
        found = self.conversations()
        return found[0] if found else None

    def rename(self, conversation_id: int, title: str) -> None:
        title = title.strip() or DEFAULT_TITLE
        self.db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def set_system_prompt(self, conversation_id: int, system_prompt: str) -> None:
        self.db.execute("UPDATE conversations SET system_prompt = ? WHERE id = ?", (system_prompt, conversation_id))

    def delete(self, conversation_id: int) -> None:
        self.db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def touch(self, conversation_id: int, model_set: str | None = None) -> None:
        self.db.execute(
            "UPDATE conversations SET updated_at = ?, model_set = COALESCE(?, model_set) WHERE id = ?",
            (time.time(), model_set, conversation_id),
        )

    # messages

    def messages(self, conversation_id: int) -> list[Message]:
        rows = self.db.execute("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,))
        return [self._message(row) for row in rows]

    def add_message(self, conversation_id: int, role: str, content: str, complete: bool = True,
                    attachments: Sequence[Attachment] = (), directory: str = "") -> Message:
        """Commit a message with its attachments (names relative to ``directory``) now; the first user message
        also names an untitled conversation."""
        now = time.time()
        self.db.execute("BEGIN IMMEDIATE")
        try:
            cursor = self.db.execute(
                "INSERT INTO messages (conversation_id, role, content, complete, created_at) VALUES (?, ?, ?, ?, ?)",
                (conversation_id, role, content, int(complete), now),
            )
            self.db.execute(
                "UPDATE conversations SET updated_at = ?, title = CASE WHEN title = ? AND ? = 'user' THEN ? ELSE title END"
                " WHERE id = ?",
                (now, DEFAULT_TITLE, role, title_from(content), conversation_id),
            )
            self.db.executemany(
                "INSERT INTO attachments (message_id, kind, name, directory, content, digest, exit_code, changed)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(cursor.lastrowid, a.kind, a.name, directory, a.content, a.digest, a.exit_code, int(a.changed))
                 for a in attachments],
            )
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        return self.message(cursor.lastrowid)

    def message(self, message_id: int) -> Message:
        row = self.db.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            raise AssistantError(f"no message with id {message_id} in {self.path}")
        return self._message(row)

    def update_answer(
        self,
        message_id: int,
        content: str,
        provenance: list[tuple[int, str]],
        stats: dict | None = None,
        complete: bool = False,
    ) -> None:
        self.db.execute(
            "UPDATE messages SET content = ?, provenance = ?, stats = ?, complete = ? WHERE id = ?",
            (content, json.dumps(provenance), None if stats is None else json.dumps(stats), int(complete), message_id),
        )

    def attachments(self, conversation_id: int) -> list[StoredAttachment]:
        """Every attachment of the conversation's messages, oldest first."""
        rows = self.db.execute(
            "SELECT a.* FROM attachments a JOIN messages m ON m.id = a.message_id WHERE m.conversation_id = ?"
            " ORDER BY a.message_id, a.id", (conversation_id,))
        return [StoredAttachment(row["message_id"], row["directory"], Attachment(
            row["kind"], row["name"], row["content"], row["digest"], row["exit_code"], bool(row["changed"])),
            bool(row["dropped"])) for row in rows]

    def drop_attachments(self, conversation_id: int, name: str | None = None) -> int:
        """Stop sending the conversation's attachments (those named ``name``, or all) to the model; how many."""
        cursor = self.db.execute(
            "UPDATE attachments SET dropped = 1 WHERE dropped = 0 AND (? IS NULL OR name = ?) AND message_id IN"
            " (SELECT id FROM messages WHERE conversation_id = ?)", (name, name, conversation_id))
        return cursor.rowcount

    def delete_message(self, message_id: int) -> None:
        self.db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    @staticmethod
    def _message(row: sqlite3.Row) -> Message:
        data = dict(row)
        data["provenance"] = [(int(level), text) for level, text in json.loads(data["provenance"] or "[]")]
        data["stats"] = json.loads(data["stats"]) if data["stats"] else None
        data["complete"] = bool(data["complete"])
        return Message(**data)
