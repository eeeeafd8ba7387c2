"""The store's schema as ordered, named migrations; each runs once and is recorded in ``migrations``.

Append new steps at the end, never edit an applied one: a user's database replays only what it lacks."""

from __future__ import annotations

import sqlite3
import time

MIGRATIONS: list[tuple[str, str]] = [
    (
        "m001_initial",
        """
        CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL,
            system_prompt TEXT NOT NULL DEFAULT '',
            model_set TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
        """,
    ),
    (
        "m002_answer_provenance",
        """
        ALTER TABLE messages ADD COLUMN provenance TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE messages ADD COLUMN stats TEXT;
        ALTER TABLE messages ADD COLUMN complete INTEGER NOT NULL DEFAULT 1;
        """,
    ),
    (
        "m003_recent_first",
        "CREATE INDEX conversations_by_update ON conversations(updated_at DESC);",
    ),
    (
        "m004_attachments",
        """
        CREATE TABLE attachments (
            id INTEGER PRIMARY KEY,
            message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            kind TEXT NOT NULL,
            name TEXT NOT NULL,
            directory TEXT NOT NULL,
            content TEXT NOT NULL,
            digest TEXT NOT NULL DEFAULT '',
            exit_code INTEGER,
            changed INTEGER NOT NULL DEFAULT 0,
            dropped INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX attachments_by_message ON attachments(message_id, id);
        """,
    ),
]


def applied(connection: sqlite3.Connection) -> list[str]:
    connection.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    return [row[0] for row in connection.execute("SELECT name FROM migrations ORDER BY rowid")]


def migrate(connection: sqlite3.Connection) -> list[str]:
    """Apply the missing migrations in order, each in its own transaction; returns the names applied.

    ``connection`` must be in autocommit mode (``isolation_level=None``) so the BEGIN here covers DDL."""
    done = set(applied(connection))
    ran = []
    for name, script in MIGRATIONS:
        if name in done:
            continue
        statements = [s.strip() for s in script.split(";") if s.strip()]
        connection.execute("BEGIN IMMEDIATE")  # the connection is in autocommit mode: DDL included
        try:
            for statement in statements:
                connection.execute(statement)
            connection.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, time.time()))
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        ran.append(name)
    return ran
