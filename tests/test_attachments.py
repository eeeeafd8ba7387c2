"""Attachments: files and command output read with clear refusals, rendered into the prompt, used by generate."""

import json
import subprocess
import sys
import os
import socket
import threading
import time
import tracemalloc

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


def bytes_read() -> int:
    """Bytes this process has read through read(2) and friends so far."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def sparse_gigabyte(path):
    with open(path, "wb") as file:
        file.truncate(1 << 30)  # no blocks written: a 1 GiB file in no time and no disk space


def unix_socket(path):
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))  # the socket file stays after the socket is closed


@pytest.mark.parametrize("name,make,message", [
    ("zero", lambda p: p.symlink_to("/dev/zero"), "zero: is a character device, not a regular file"),
    ("pipe", os.mkfifo, "pipe: is a FIFO (named pipe), not a regular file"),
    ("sock", unix_socket, "sock: is a socket, not a regular file"),
    ("big.log", sparse_gigabyte, "big.log: 1024 MiB is over the 256 KiB limit"),
])
def test_only_a_regular_file_is_read_and_only_under_the_size_limit(tmp_path, name, make, message):
    make(tmp_path / name)
    began, before = time.monotonic(), bytes_read()
    with pytest.raises(AttachmentError) as refused:
        attachments.read_file(name, tmp_path)
    assert str(refused.value) == message + (" for an attachment (attach a smaller part)" if "limit" in message else "")
    assert bytes_read() - before < 64 * 1024 and time.monotonic() - began < 2  # refused without reading it
    (tmp_path / "real.py").write_text("x = 1\n")
    (tmp_path / "link.py").symlink_to("real.py")
    assert attachments.read_file("link.py", tmp_path).content == "x = 1\n"  # a link to a file is that file


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


def process_gone(pid: int, within: float = 2.0) -> bool:
    """Whether process ``pid`` ends within ``within`` seconds (SIGKILL is delivered asynchronously; a zombie
    waiting for its new parent to reap it counts as ended)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rpartition(")")[2].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def test_a_stopped_command_keeps_its_output_so_far_and_ends_its_background_children(tmp_path):
    began = time.monotonic()
    # the child ignores SIGTERM and holds the output pipe open: only ending the whole group stops it
    script = "echo started; (trap '' TERM; exec sleep 100) & echo $! > child.pid; sleep 100"
    timed_out = attachments.run_command(script, tmp_path, timeout=0.5)
    assert timed_out.content == "started\n[timed out: still running after 0.5 s, stopped]\n"
    assert timed_out.exit_code is None and timed_out.stopped == "timed out: still running after 0.5 s, stopped"
    assert timed_out.render().startswith(f"Output of `{script}` (stopped before it exited):")
    assert process_gone(int((tmp_path / "child.pid").read_text()))
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    cancelled = attachments.run_command("echo a; sleep 100 & echo $! > child.pid; sleep 100; wait", tmp_path,
                                        cancel=cancel)
    assert cancelled.content.startswith("a\n[stopped by the user after 0.") and cancelled.exit_code is None
    assert process_gone(int((tmp_path / "child.pid").read_text()))
    # a shell that is done does not wait for what it left running in the background, nor leave it behind
    finished = attachments.run_command("sleep 100 & echo $! > child.pid; echo done", tmp_path)
    assert (finished.content, finished.exit_code) == ("done\n", 0)
    assert process_gone(int((tmp_path / "child.pid").read_text()))
    assert time.monotonic() - began < 10


def test_command_output_is_cut_as_it_streams_keeping_its_end(tmp_path):
    tracemalloc.start()
    try:
        ran = attachments.run_command("seq 1 3000000", tmp_path)  # about 21 MB
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    whole = "".join(f"{n}\n" for n in range(1, 3000001))
    kept = whole[-attachments.MAX_OUTPUT_BYTES:]
    assert ran.content == f"[… the first {len(whole) - len(kept)} bytes cut …]\n" + kept
    assert ran.exit_code == 0 and peak < 2 * 1024 * 1024  # never the whole output in memory


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
