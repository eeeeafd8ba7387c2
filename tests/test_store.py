"""The conversation store on a real SQLite file: migrations, WAL, search, and durability against kill -9."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from assistant import home
from assistant.attachments import Attachment
from assistant.conversation import export, settings
from assistant.conversation.codeblocks import code_blocks
from assistant.conversation.migrations import MIGRATIONS
from assistant.conversation.store import DEFAULT_TITLE, Store, title_from
from assistant.errors import AssistantError


def test_migrations_run_once_in_order_and_wal_is_on():
    store = Store()
    names = [row[0] for row in store.db.execute("SELECT name FROM migrations ORDER BY rowid")]
    assert names == [name for name, _ in MIGRATIONS]
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()
    again = Store()  # reopening applies nothing twice
    assert [r[0] for r in again.db.execute("SELECT name FROM migrations")] == names
    assert again.path == home.database_path()


def test_an_older_database_is_upgraded_without_losing_data(tmp_path):
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    from assistant.conversation import migrations

    first_name, first_script = MIGRATIONS[0]
    db.executescript(first_script)
    migrations.applied(db)
    db.execute("INSERT INTO migrations VALUES (?, 0)", (first_name,))
    db.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('kept', 0, 0)")
    db.execute("INSERT INTO messages (conversation_id, role, content, created_at) VALUES (1, 'user', 'hi', 0)")
    db.close()
    store = Store(path)
    (message,) = store.messages(1)
    assert (message.content, message.provenance, message.complete) == ("hi", [], True)


def test_a_database_from_before_attachments_gets_their_table_and_keeps_its_messages(tmp_path):
    path = tmp_path / "before.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    from assistant.conversation import migrations

    before = [(name, script) for name, script in MIGRATIONS if name != "m004_attachments"]
    assert len(before) == len(MIGRATIONS) - 1 and MIGRATIONS[-1][0] == "m004_attachments"
    for name, script in before:
        db.executescript(script)
        migrations.applied(db)
        db.execute("INSERT INTO migrations VALUES (?, 0)", (name,))
    db.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('kept', 0, 0)")
    db.execute("INSERT INTO messages (conversation_id, role, content, created_at) VALUES (1, 'user', 'hi', 0)")
    db.execute("INSERT INTO messages (conversation_id, role, content, provenance, complete, created_at)"
               " VALUES (1, 'assistant', 'hello', '[[1, \"hel\"], [0, \"lo\"]]', 1, 0)")
    db.close()
    store = Store(path)
    assert [row[0] for row in store.db.execute("SELECT name FROM migrations ORDER BY rowid")][-1] == "m004_attachments"
    user, answer = store.messages(1)
    assert (user.content, answer.content, answer.provenance) == ("hi", "hello", [(1, "hel"), (0, "lo")])
    assert store.attachments(1) == []
    attached = Attachment("file", "app.py", "x = 1\n", "d1")
    message = store.add_message(1, "user", "and @app.py?", attachments=[attached], directory="/project")
    (stored,) = store.attachments(1)
    assert (stored.message_id, stored.directory, stored.attachment, stored.dropped) == (message.id, "/project", attached,
                                                                                        False)


def test_attachments_are_stored_with_their_message_dropped_and_deleted_with_it():
    store = Store()
    conversation = store.new_conversation()
    files = [Attachment("file", "a.py", "a\n", "da"), Attachment("file", "b.py", "b\n", "db", changed=True)]
    output = Attachment("command", "pytest -x", "1 failed\n", exit_code=1)
    first = store.add_message(conversation.id, "user", "look", attachments=files, directory="/p")
    second = store.add_message(conversation.id, "user", "and this", attachments=[output], directory="/p")
    stored = store.attachments(conversation.id)
    assert [(s.message_id, s.attachment) for s in stored] == [(first.id, files[0]), (first.id, files[1]),
                                                              (second.id, output)]
    assert store.drop_attachments(conversation.id, "a.py") == 1
    assert [s.dropped for s in store.attachments(conversation.id)] == [True, False, False]
    assert store.drop_attachments(conversation.id) == 2
    other = store.new_conversation()
    store.add_message(other.id, "user", "elsewhere", attachments=[files[0]], directory="/q")
    store.delete(conversation.id)  # attachments go with their messages
    assert store.db.execute("SELECT COUNT(*) FROM attachments").fetchone()[0] == 1


def test_conversations_messages_rename_search_delete():
    store = Store()
    first = store.new_conversation()
    assert first.title == DEFAULT_TITLE
    store.add_message(first.id, "user", "\n  Write a function that parses CSV files with quoted fields\nplease")
    assert store.conversation(first.id).title == title_from("Write a function that parses CSV files with quoted fields")
    assert store.conversation(first.id).title.endswith("…")
    answer = store.add_message(first.id, "assistant", "", complete=False)
    store.update_answer(answer.id, "def parse(): pass", [(2, "def parse"), (0, "(): pass")], {"new_tokens": 5}, True)
    time.sleep(0.01)
    second = store.new_conversation(system_prompt="be brief")
    store.add_message(second.id, "user", "sort a list")
    assert [c.id for c in store.conversations()] == [second.id, first.id]
    assert [c.id for c in store.conversations("PARSE()")] == [first.id]  # message text, any case
    assert [c.id for c in store.conversations("sort")] == [second.id]  # title
    assert store.conversations("100%") == []  # LIKE wildcards are literal
    store.rename(first.id, "CSV parser")
    assert store.conversation(first.id).title == "CSV parser"
    saved = store.messages(first.id)[1]
    assert (saved.content, saved.provenance, saved.stats, saved.complete) == (
        "def parse(): pass", [(2, "def parse"), (0, "(): pass")], {"new_tokens": 5}, True)
    store.delete(first.id)
    assert [c.id for c in store.conversations()] == [second.id]
    assert store.messages(first.id) == []  # messages go with their conversation
    with pytest.raises(AssistantError, match="no conversation"):
        store.conversation(first.id)


def test_an_unreadable_database_is_an_assistant_error(tmp_path):
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(AssistantError, match="bad.sqlite3"):
        Store(bad)


def test_kill_9_while_writing_loses_nothing_committed(tmp_path):
    """A writer commits pieces and reports each one after its commit; kill -9 it mid-stream."""
    path = tmp_path / "db.sqlite3"
    writer = textwrap.dedent(f"""
        import sys, time
        from assistant.conversation.recorder import AnswerRecorder
        from assistant.conversation.store import Store
        store = Store({str(path)!r})
        conversation = store.new_conversation()
        store.add_message(conversation.id, "user", "count")
        answer = store.add_message(conversation.id, "assistant", "", complete=False)
        recorder = AnswerRecorder(store, answer.id, interval=0)
        n = 0
        while True:
            shown = recorder.add(n % 3, f"tok{{n}} ")
            print("".join(text for _, text in shown), end="", flush=True)  # what a UI would show
            n += 1
            time.sleep(0.002)
    """)
    process = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    shown = ""
    while shown.count("tok") < 200:
        shown += os.read(process.stdout.fileno(), 65536).decode()
    process.send_signal(signal.SIGKILL)
    process.wait()
    shown += process.stdout.read()
    messages = Store(path).messages(1)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].content.startswith(shown)
    assert not messages[1].complete
    assert "".join(text for _, text in messages[1].provenance) == messages[1].content


def test_settings_round_trip_and_keep_other_sections():
    path = home.config_path()
    path.write_text(json.dumps({"other": {"x": 1}}))
    assert settings.load() == settings.ChatSettings()
    chosen = settings.ChatSettings(temperature=0.7, max_tokens=64, speculation=False, keymap={"new_chat": "ctrl+t"})
    settings.save(chosen)
    assert settings.load() == chosen
    assert json.loads(path.read_text())["other"] == {"x": 1}
    assert chosen.level_count(3) == 1
    assert settings.ChatSettings(levels=2).level_count(3) == 2
    assert settings.ChatSettings(levels=9).level_count(3) == 3
    path.write_text("{broken")
    with pytest.raises(AssistantError, match="config"):
        settings.load()


def test_export_to_markdown_and_code_blocks():
    store = Store()
    conversation = store.new_conversation(system_prompt="You write Python.")
    store.add_message(conversation.id, "user", "Add two numbers")
    answer = store.add_message(conversation.id, "assistant", "", complete=False)
    store.update_answer(answer.id, "Here:\n```python\ndef add(a, b):\n    return a + b\n```\n", [], None, False)
    path = export.export(store.conversation(conversation.id), store.messages(conversation.id))
    text = path.read_text()
    assert path.parent == home.data_dir() / "exports" and path.name == f"{conversation.id}-add-two-numbers.md"
    assert text.startswith("# Add two numbers\n")
    assert "## System\n\nYou write Python." in text
    assert "## You\n\nAdd two numbers" in text
    assert "## Assistant (stopped)\n\nHere:\n```python\ndef add(a, b):" in text
    (block,) = code_blocks(store.messages(conversation.id)[1].content)
    assert (block.language, block.code) == ("python", "def add(a, b):\n    return a + b\n")
    assert block.label == "python, 2 lines: def add(a, b):"
    assert [b.code for b in code_blocks("```\nunclosed\nstill")] == ["unclosed\nstill"]


@pytest.fixture
def loose_umask():
    """The common default: new files readable by everyone, so privacy must come from us."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def mode(path) -> int:
    return os.stat(path).st_mode & 0o777


def test_a_fresh_data_directory_and_database_are_private(tmp_path, monkeypatch, loose_umask, capsys):
    monkeypatch.setenv("ASSISTANT_HOME", str(tmp_path / "fresh" / "assistant"))
    store = Store()
    conversation = store.new_conversation("secrets")
    store.add_message(conversation.id, "user", "API_KEY=do-not-share")
    directory = home.data_dir()
    assert mode(directory) == 0o700 and mode(store.path) == 0o600
    for suffix in ("-wal", "-shm"):  # SQLite's side files hold the same data
        side = store.path.with_name(store.path.name + suffix)
        assert side.exists() and mode(side) == 0o600, suffix
    store.close()
    assert mode(tmp_path / "fresh") == 0o755  # parents are not ours to change
    assert capsys.readouterr().err == ""


def test_an_older_readable_data_directory_and_database_are_tightened_once(tmp_path, monkeypatch, loose_umask,
                                                                           capsys):
    directory = tmp_path / "assistant"
    directory.mkdir(mode=0o755)
    database = directory / "conversations.sqlite3"
    db = sqlite3.connect(database, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")
    db.execute("INSERT INTO t VALUES (1)")  # the -wal file stays while this connection is open
    os.chmod(directory, 0o755)
    os.chmod(database, 0o644)
    wal = database.with_name(database.name + "-wal")
    assert mode(wal) == 0o644
    monkeypatch.setenv("ASSISTANT_HOME", str(directory))
    Store().close()
    assert mode(directory) == 0o700 and mode(database) == 0o600 and mode(wal) == 0o600
    db.close()
    notes = capsys.readouterr().err.splitlines()
    assert len(notes) == 2 and all(line.startswith("note: ") and "readable by other users" in line for line in notes)
    assert f"{directory} was readable by other users (mode 755); it is now 700" in notes[0]
    Store().close()  # tightened for good: nothing more to say
    assert capsys.readouterr().err == ""
