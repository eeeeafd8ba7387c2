"""Attachments: files and command output read with clear refusals, rendered into the prompt, used by generate."""

import json
import subprocess
import sys
import threading
import time

import pytest

from assistant import attachments
from assistant.attachments import AttachmentError


def test_a_file_is_attached_as_a_fenced_block_under_its_path(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("def main():\n    return 1\n")
    attached = attachments.read_file("src/app.py", tmp_path)
    assert attached.render() == "File `src/app.py`:\n```python\ndef main():\n    return 1\n```"
    message = attachments.with_attachments("Add a docstring.", [attached])
    assert message.endswith("```\n\nAdd a docstring.") and message.startswith("File `src/app.py`")
    assert "src/app.py" in attachments.system_note([attached], tmp_path) and str(tmp_path) in \
        attachments.system_note([attached], tmp_path)


@pytest.mark.parametrize("name,make,message", [
    ("missing.py", None, "missing.py: no such file"),
    ("folder", lambda p: p.mkdir(), "folder: is a directory"),
    ("image.png", lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), "image.png: a binary file, not text"),
    ("latin.txt", lambda p: p.write_bytes("café".encode("latin-1")), "latin.txt: not UTF-8 text"),
    ("huge.py", lambda p: p.write_text("x = 1\n" * 50000), "huge.py: 292 KiB is over the 256 KiB limit"),
])
def test_what_cannot_be_attached_is_named_with_the_reason(tmp_path, name, make, message):
    if make:
        make(tmp_path / name)
    with pytest.raises(AttachmentError) as refused:
        attachments.read_file(name, tmp_path)
    assert str(refused.value).startswith(message)


def test_globs_expand_to_files_and_a_changed_file_is_reread_and_marked(tmp_path):
    for name in ("b.py", "a.py", "notes.txt"):
        (tmp_path / name).write_text(f"# {name}\n")
    (tmp_path / "pkg.py").mkdir()  # a directory matching the glob is not a file to attach
    assert attachments.expand("*.py", tmp_path) == ["a.py", "b.py"]
    assert attachments.expand("a.py", tmp_path) == ["a.py"]
    with pytest.raises(AttachmentError, match=r"\*\.rs: matches no file"):
        attachments.expand("*.rs", tmp_path)
    first = attachments.read_file("a.py", tmp_path)
    assert attachments.refresh(first, tmp_path) is first
    (tmp_path / "a.py").write_text("# a.py, edited\n")
    again = attachments.refresh(first, tmp_path)
    assert again.changed and again.content == "# a.py, edited\n" and "(changed since it was first attached)" in again.render()
    (tmp_path / "a.py").unlink()
    with pytest.raises(AttachmentError, match="a.py: no such file"):
        attachments.refresh(first, tmp_path)


def test_a_command_gives_its_output_and_exit_code(tmp_path):
    ran = attachments.run_command("echo out; echo err >&2; exit 3", tmp_path)
    assert ran.exit_code == 3 and ran.content == "out\nerr\n"
    assert ran.render() == "Output of `echo out; echo err >&2; exit 3` (exit code 3):\n```\nout\nerr\n```"
    long = attachments.run_command(f"{sys.executable} -c \"print('y' * 100000)\"", tmp_path)
    assert len(long.content) < 70000 and long.content.startswith("[… ") and long.content.rstrip().endswith("yyy")


def test_a_command_that_never_ends_is_stopped_by_timeout_or_cancel(tmp_path):
    began = time.monotonic()
    with pytest.raises(AttachmentError, match="still running after 0.5 s, stopped"):
        attachments.run_command("sleep 30", tmp_path, timeout=0.5)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with pytest.raises(AttachmentError, match="cancelled, stopped"):
        attachments.run_command("sleep 30 & sleep 30; wait", tmp_path, cancel=cancel)
    assert time.monotonic() - began < 5


def generate(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "assistant", "generate", *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def test_generate_attaches_files_into_the_prompt(demo_set, tmp_path):
    (tmp_path / "stack.py").write_text("class Stack:\n    def __init__(self):\n        self.items = []\n")
    with_file = generate("-f", "stack.py", "Add a push method.", "-n", "24", "--json", cwd=tmp_path)
    assert with_file.returncode == 0, with_file.stderr
    attached = attachments.read_file("stack.py", tmp_path)
    spelled_out = generate(attachments.with_attachments("Add a push method.", [attached]), "--system",
                           attachments.system_note([attached], tmp_path), "-n", "24", "--json", cwd=tmp_path)
    assert json.loads(with_file.stdout)["tokens"] == json.loads(spelled_out.stdout)["tokens"]
    assert json.loads(with_file.stdout)["stats"]["prompt_tokens"] > 40  # the file is in it


def test_generate_refuses_a_missing_attachment_in_one_line(tmp_path):
    done = generate("-f", "nowhere.py", "Explain it.", cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.strip() == "error: nowhere.py: no such file"


def test_at_mentions_name_paths_and_leave_decorators_and_addresses_alone(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("")
    (tmp_path / "Makefile").write_text("")
    text = ("Compare @src/app.py. with @Makefile and @missing.py, @docs/ @property @pytest.mark.parametrize "
            "@app.route(\"/\") me@example.com @src/app.py again")
    assert attachments.mentions(text, tmp_path) == ["src/app.py", "Makefile", "missing.py", "docs/"]


def test_completions_list_what_a_partial_path_can_become(tmp_path):
    (tmp_path / "src").mkdir()
    for name in ("src/app.py", "src/api.py", "setup.py", ".env"):
        (tmp_path / name).write_text("")
    assert attachments.completions("s", tmp_path) == ["setup.py", "src/"]
    assert attachments.completions("src/a", tmp_path) == ["src/api.py", "src/app.py"]
    assert attachments.completions("", tmp_path) == ["setup.py", "src/"]  # hidden files only when asked for
    assert attachments.completions(".e", tmp_path) == [".env"]
    assert attachments.completions("nowhere/x", tmp_path) == []
