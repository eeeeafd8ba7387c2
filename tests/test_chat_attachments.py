"""The chat's attachments below the UI: the model's view of stored attachments from any working directory,
files changed or gone since, and writing a code block with its diff, atomically."""

import os

import pytest

from assistant.attachments import Attachment, read_file, with_attachments
from assistant.conversation import attached_files, backend, writing
from assistant.conversation.store import Store


def test_the_model_sees_each_turns_attachments_and_the_files_named_once(tmp_path):
    (tmp_path / "app.py").write_text("def main():\n    pass\n")
    store = Store()
    conversation = store.new_conversation(system_prompt="Be brief.")
    file = read_file("app.py", tmp_path)
    first = store.add_message(conversation.id, "user", "Explain @app.py", attachments=[file], directory=str(tmp_path))
    answer = store.add_message(conversation.id, "assistant", "It does nothing.")
    again = store.add_message(conversation.id, "user", "Sure?", attachments=[file], directory=str(tmp_path))
    store.add_message(conversation.id, "error", "shown, never sent")
    prompt = backend.prompt_messages("Be brief.", store.messages(conversation.id), store.attachments(conversation.id),
                                     tmp_path)
    assert prompt == [
        {"role": "system", "content": "Be brief.\n\n" + attached_files.working_directory(tmp_path)},
        {"role": "user", "content": with_attachments(first.content, [file])},
        {"role": "assistant", "content": answer.content},
        {"role": "user", "content": with_attachments(again.content, [file])},
    ]
    # resumed from another directory: the file goes by its full path
    elsewhere = backend.prompt_messages("", store.messages(conversation.id), store.attachments(conversation.id),
                                        tmp_path / "sub")
    assert f"File `{tmp_path / 'app.py'}`:" in elsewhere[1]["content"]
    assert elsewhere[0]["content"] == attached_files.working_directory(tmp_path / "sub")


def test_changed_files_are_reread_from_where_they_were_attached_and_gone_ones_named(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    (tmp_path / "sub" / "a.py").write_text("# another a.py\n")
    store = Store()
    conversation = store.new_conversation()
    store.add_message(conversation.id, "user", "look", directory=str(tmp_path),
                      attachments=[read_file(name, tmp_path) for name in ("a.py", "b.py", "c.py")])
    stored = store.attachments(conversation.id)
    assert attached_files.changed_files(stored, tmp_path) == ([], [])
    (tmp_path / "a.py").write_text("# a.py, edited\n")
    (tmp_path / "b.py").write_text("# b.py, edited\n")
    (tmp_path / "c.py").unlink()
    changed, gone = attached_files.changed_files(stored, tmp_path, attaching_now=[attached_files.location(tmp_path, "b.py")])
    assert [(a.name, a.content, a.changed) for a in changed] == [("a.py", "# a.py, edited\n", True)]
    assert gone == ["c.py: no such file"]
    # from another directory the same names are not confused with what is there
    changed, _ = attached_files.changed_files(stored, tmp_path / "sub")
    assert [a.name for a in changed] == [str(tmp_path / "a.py"), str(tmp_path / "b.py")]
    store.drop_attachments(conversation.id)
    assert attached_files.changed_files(store.attachments(conversation.id), tmp_path) == ([], [])


def test_writing_shows_the_diff_and_replaces_atomically(tmp_path):
    target = tmp_path / "app.py"
    target.write_text("x = 1\n")
    os.chmod(target, 0o750)
    planned = writing.plan("app.py", "x = 2\n", tmp_path)
    assert planned.diff == "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    writing.write(planned)
    assert target.read_text() == "x = 2\n" and target.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.py"]  # no temporary file left
    new = writing.plan("new.py", "y = 1", tmp_path)
    assert new.old is None and new.diff.startswith("--- /dev/null\n+++ b/new.py\n")
    assert new.diff.endswith("+y = 1\n\\ No newline at end of file\n")
    writing.write(new)
    assert (tmp_path / "new.py").read_text() == "y = 1"
    stale = writing.plan("app.py", "x = 3\n", tmp_path)
    target.write_text("edited meanwhile\n")
    with pytest.raises(writing.WriteError, match="changed since the diff was shown"):
        writing.write(stale)
    assert target.read_text() == "edited meanwhile\n"


@pytest.mark.parametrize("name,make,reason", [
    ("folder", lambda p: p.mkdir(), "folder: is a directory"),
    ("no/such.py", None, "no/such.py: no such directory"),
    ("image.png", lambda p: p.write_bytes(b"\x89PNG\xff\xfe"), "image.png: not a UTF-8 text file"),
])
def test_what_cannot_be_written_is_named(tmp_path, name, make, reason):
    if make:
        make(tmp_path / name)
    with pytest.raises(writing.WriteError) as refused:
        writing.plan(name, "text", tmp_path)
    assert str(refused.value).startswith(reason)


def test_writing_through_a_symbolic_link_keeps_the_link_and_writes_its_target(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "app.py"
    target.write_text("x = 1\n")
    os.chmod(target, 0o640)
    (tmp_path / "app.py").symlink_to("real/app.py")
    planned = writing.plan("app.py", "x = 2\n", tmp_path)
    assert planned.path == target and planned.link == tmp_path / "app.py"
    assert planned.diff == "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"  # the target's text
    steps = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda handle: steps.append("fsync") or fsync(handle))
    monkeypatch.setattr(os, "replace", lambda *paths: steps.append(("replace", paths[1])) or replace(*paths))
    writing.write(planned)
    assert steps[:2] == ["fsync", ("replace", target)]  # on disk before the name points at it
    assert (tmp_path / "app.py").is_symlink() and os.readlink(tmp_path / "app.py") == "real/app.py"
    assert target.read_text() == "x = 2\n" and target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["app.py"]  # the temporary name was beside it
    (tmp_path / "new.py").symlink_to("real/new.py")  # a link to nothing yet: its target is created
    created = writing.plan("new.py", "y = 1\n", tmp_path)
    assert created.old is None and created.path == tmp_path / "real" / "new.py"
    writing.write(created)
    assert (tmp_path / "new.py").is_symlink() and (tmp_path / "real" / "new.py").read_text() == "y = 1\n"
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(writing.WriteError, match="^pipe: not a regular file, not replacing it$"):
        writing.plan("pipe", "z", tmp_path)  # refused without opening it, which would wait for a writer


def test_turns_left_out_to_fit_the_context_take_their_files_out_of_the_system_note(tmp_path):
    for name in ("old.py", "kept.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    store = Store()
    conversation = store.new_conversation()
    output = Attachment("command", "make test", "1 failed\n", exit_code=1)
    store.add_message(conversation.id, "user", "Look", directory=str(tmp_path),
                      attachments=[read_file("old.py", tmp_path), read_file("kept.py", tmp_path), output])
    store.add_message(conversation.id, "assistant", "Seen.")
    store.add_message(conversation.id, "user", "Again", directory=str(tmp_path),
                      attachments=[read_file("kept.py", tmp_path)])
    prompt = backend.chat_prompt("Be brief.", store.messages(conversation.id), store.attachments(conversation.id),
                                 tmp_path)
    whole = prompt.messages()
    assert whole == backend.prompt_messages("Be brief.", store.messages(conversation.id),
                                            store.attachments(conversation.id), tmp_path)
    assert whole[0]["content"] == "Be brief.\n\n" + attached_files.working_directory(tmp_path)
    fitted = prompt.messages(left_out=2)
    assert [m["content"] for m in fitted[1:]] == [whole[-1]["content"]]
    assert fitted[0]["content"] == (
        f"Be brief.\n\nThe user works in {tmp_path}: the files they attach are in their messages, each under its "
        "path relative to that directory. Older turns were left out to fit the context, and with them "
        "the file old.py; the output of `make test`: their contents are no longer in the conversation.")
