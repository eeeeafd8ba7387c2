"""`assistant chat` in a real terminal (tmux): ask, wait, quit, resume; kill -9 mid-answer loses nothing shown; a file
attached with `@` is asked about and shown again on resume."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from assistant.conversation.settings import ChatSettings, load, save
from assistant.conversation.store import Store

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = Path(os.environ.get("ASSISTANT_CAPTURES", "")) if os.environ.get("ASSISTANT_CAPTURES") else None


class Terminal:
    """One tmux session running `assistant chat`; always killed on exit, whatever happened."""

    def __init__(self, home: Path, *args: str, width=120, height=40, cwd: Path = ROOT, program: Path | None = None):
        """By default this checkout's assistant with ``home`` as ASSISTANT_HOME; ``program`` (an installed one,
        such as the bundle's) runs in a clean environment with ``home`` as HOME."""
        self.name = f"assistant-test-{uuid.uuid4().hex[:8]}"
        if program is None:
            path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
            env = f"-u COLUMNS -u LINES ASSISTANT_HOME={home} ASSISTANT_THREADS=1 PYTHONPATH={path} TERM=xterm-256color"
            program = f"{sys.executable} -m assistant"
        else:
            env = f"-i HOME={home} PATH=/usr/bin:/bin TERM=xterm-256color"
        command = f"cd {cwd} && exec env {env} {program} chat {' '.join(args)}"
        self.socket = self.name  # a private tmux server: no one else's options or sessions
        subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", "new-session", "-d", "-s", self.name,
                        "-x", str(width), "-y", str(height), command], check=True)
        # with no client attached tmux may shrink the window to its default size: pin ours
        self.tmux("set-option", "-t", self.name, "window-size", "manual")
        self.tmux("resize-window", "-t", self.name, "-x", str(width), "-y", str(height))
        self.pid = int(self.tmux("display-message", "-p", "-t", self.name, "#{pane_pid}").strip())

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True).stdout

    def alive(self) -> bool:
        return subprocess.run(["tmux", "-L", self.socket, "has-session", "-t", self.name],
                              capture_output=True).returncode == 0

    def capture(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def send(self, *keys: str) -> None:
        subprocess.run(["tmux", "-L", self.socket, "send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, condition, timeout=240.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.capture()
            if condition(screen):
                return screen
            if not self.alive():
                raise AssertionError("assistant chat exited early")
            time.sleep(0.2)
        size = self.tmux("display-message", "-p", "-t", self.name, "#{window_width}x#{window_height}").strip()
        raise AssertionError(f"timed out; the {size} screen shows:\n{self.capture()}")

    def wait_exit(self, timeout=20.0) -> None:
        deadline = time.monotonic() + timeout
        while self.alive():
            assert time.monotonic() < deadline, f"did not exit; the screen shows:\n{self.capture()}"
            time.sleep(0.1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def keep(name: str, screen: str) -> None:
    """Write a capture where ASSISTANT_CAPTURES points, for the record."""
    if CAPTURES:
        CAPTURES.mkdir(parents=True, exist_ok=True)
        (CAPTURES / name).write_text(screen)


def status_line(screen: str) -> str:
    lines = [line for line in screen.splitlines() if line.strip()]
    return lines[-2] if len(lines) > 1 else ""


def test_chat_then_resume(assistant_home, demo_set):
    """`assistant chat` answers, and resumes next time (a fresh machine's first chat: test_demo_terminal.py)."""
    question = "def fibonacci(n):"
    with Terminal(assistant_home) as terminal:
        terminal.wait_for(lambda s: "ready" in status_line(s), timeout=300)
        terminal.send(question, "C-j", "    if n < 2:", "Enter")
        screen = terminal.wait_for(lambda s: "tok/s" in status_line(s))
        keep("main-screen.txt", screen)
        terminal.send("F3")
        keep("speculation-view.txt", terminal.wait_for(lambda s: "Speculation view:" in s, timeout=10))
        terminal.send("C-q")
        terminal.wait_exit()
    store = Store(assistant_home / "conversations.sqlite3")
    (conversation,) = store.conversations()
    user, answer = store.messages(conversation.id)
    assert (user.role, user.content, conversation.title) == ("user", question + "\n    if n < 2:", question)
    assert answer.role == "assistant" and answer.content.strip() and answer.complete
    with Terminal(assistant_home) as terminal:
        screen = terminal.wait_for(lambda s: "ready" in status_line(s) and question in s, timeout=60)  # the conversation is back, with its answer
        first_line = next(line for line in answer.content.splitlines() if line.strip()).strip()[:20]
        assert first_line in screen
        terminal.send("C-q")
        terminal.wait_exit()


def test_a_first_message_in_brackets_is_its_title_across_a_restart(assistant_home, demo_set):
    """`[/INST] what does this tag mean?` as a first message once crashed the chat, and every start after it
    (the conversation list read the stored title as markup): it is answered, and shown as typed after a restart,
    as the title in the list and as the message."""
    question = "[/INST] what does this tag mean?"
    save(ChatSettings(max_tokens=16))
    with Terminal(assistant_home) as terminal:
        terminal.wait_for(lambda s: "ready" in status_line(s), timeout=120)
        terminal.send(question, "Enter")
        terminal.wait_for(lambda s: "tok/s" in status_line(s))
        terminal.send("C-q")
        terminal.wait_exit()
    store = Store(assistant_home / "conversations.sqlite3")
    (conversation,) = store.conversations()
    assert conversation.title == question and store.messages(conversation.id)[1].content.strip()
    with Terminal(assistant_home) as terminal:
        screen = terminal.wait_for(lambda s: "ready" in status_line(s) and question in s, timeout=60)
        keep("bracket-title.txt", screen)
        sidebar = [line[:28].strip() for line in screen.splitlines()]
        assert any(line.startswith("[/INST] what does") for line in sidebar), screen  # the title, in the list
        terminal.send("C-q")
        terminal.wait_exit()


def test_kill_9_during_an_answer_loses_nothing_on_screen(assistant_home, demo_set):
    save(ChatSettings(max_tokens=3000, speculation_view=True))  # plain text on screen, easy to compare
    with Terminal(assistant_home, width=100, height=30) as terminal:
        terminal.wait_for(lambda s: "ready" in status_line(s), timeout=120)
        terminal.send("C-b")  # hide the conversation list: only the answer's text in the message column
        terminal.send("def fibonacci(n):", "C-j", "    if n < 2:", "Enter")  # code to continue: a long answer
        screen = terminal.wait_for(lambda s: "ready" not in status_line(s) and len(answer_lines(s)) >= 6,
                                   timeout=120)  # streaming, and enough of it on screen
        os.kill(terminal.pid, signal.SIGKILL)
        terminal.wait_exit()
    shown = "".join(answer_lines(screen)).replace(" ", "")
    store = Store(assistant_home / "conversations.sqlite3")
    (conversation,) = store.conversations()
    _, answer = store.messages(conversation.id)
    assert not answer.complete
    assert shown and shown in re.sub(r"\s", "", answer.content), (screen, answer.content)


def words(screen: str) -> str:
    """The screen's text with every run of spaces, box edges and line ends as one space (messages wrap)."""
    return " ".join(re.sub(r"[▕▏▎▊│]", " ", screen).split())


def answer_lines(screen: str) -> list[str]:
    """The answer's lines as shown: after the last "Assistant" label (or from the top, once a long answer has
    scrolled the label away: the screen takes a fast answer's tokens several lines at a time), before the legend."""
    lines = screen.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == "Assistant"]
    ends = [i for i, line in enumerate(lines) if "Speculation view:" in line]
    start = starts[-1] + 1 if starts else 0
    if not ends or ends[-1] < start:
        return []
    lines = [re.sub(r"[\u2580-\u259f]", "", line).strip() for line in lines[start: ends[-1]]]  # no scrollbar
    return [line for line in lines if line]


def answered_after(screen: str, question: str) -> bool:
    """Whether the screen shows an answer's text under the last message ``question`` (its "Assistant" label and
    at least one line after it)."""
    if question not in screen:
        return False
    tail = screen[screen.rindex(question):]
    return any(line.strip() == "Assistant" for line in tail.splitlines()) and bool(answer_lines(tail))


def test_attach_a_file_with_at_ask_about_it_and_see_it_again_on_resume(assistant_home, demo_set, tmp_path):
    (tmp_path / "stack.py").write_text("class Stack:\n    def __init__(self):\n        self.items = []\n")
    with Terminal(assistant_home, cwd=tmp_path) as terminal:
        terminal.wait_for(lambda s: "ready" in status_line(s), timeout=120)
        terminal.send("C-b")  # the conversation list away: the whole width for the messages
        terminal.send("Add a push method to @st", "Tab")  # Tab completes the path
        terminal.wait_for(lambda s: "@stack.py" in s, timeout=10)
        terminal.send("please", "Enter")
        screen = terminal.wait_for(lambda s: "tok/s" in status_line(s))
        keep("attached-file.txt", screen)
        assert "Add a push method to @stack.py please" in screen and "Attached: stack.py (3 lines)" in screen
        terminal.send("C-q")
        terminal.wait_exit()
    store = Store(assistant_home / "conversations.sqlite3")
    (conversation,) = store.conversations()
    user, answer = store.messages(conversation.id)
    (stored,) = store.attachments(conversation.id)
    assert (stored.message_id, stored.attachment.name, stored.directory) == (user.id, "stack.py", str(tmp_path))
    assert answer.content.strip() and answer.complete
    with Terminal(assistant_home, cwd=tmp_path) as terminal:
        screen = terminal.wait_for(lambda s: "ready" in status_line(s) and "Attached: stack.py (3 lines)" in s,
                                   timeout=60)
        assert "Add a push method to @stack.py please" in screen
        terminal.send("C-q")
        terminal.wait_exit()


ANSWER = ("Here it is:\n\n```python\nclass Stack:\n    def __init__(self):\n        self.items = []\n\n"
          "    def push(self, item):\n        self.items.append(item)\n```\n")


def test_run_a_command_and_save_a_code_block_after_confirming(assistant_home, demo_set, tmp_path):
    """`!cmd` asks, runs and attaches its output and exit code; `/save` shows the diff and writes on Enter."""
    stack = "class Stack:\n    def __init__(self):\n        self.items = []\n"
    (tmp_path / "stack.py").write_text(stack)
    store = Store(assistant_home / "conversations.sqlite3")
    conversation = store.new_conversation()
    store.add_message(conversation.id, "user", "Add push to the stack")
    answer = store.add_message(conversation.id, "assistant", "", complete=False)
    store.update_answer(answer.id, ANSWER, [(0, ANSWER)], None, True)
    store.close()
    with Terminal(assistant_home, cwd=tmp_path) as terminal:
        terminal.wait_for(lambda s: "ready" in status_line(s) and "Add push to the stack" in s, timeout=120)
        terminal.send("C-b")
        terminal.send("!echo from-the-shell; exit 3", "Enter")
        screen = terminal.wait_for(lambda s: "echo from-the-shell" in s and "Run this command" in s, timeout=10)
        keep("run-confirm.txt", screen)
        terminal.send("Enter")  # the focus starts on Cancel: an Enter too many runs nothing
        terminal.wait_for(lambda s: "Not run." in s and "Run this command" not in s, timeout=10)
        terminal.send("!echo from-the-shell; exit 3", "Enter")
        terminal.wait_for(lambda s: "Run this command" in s, timeout=10)
        terminal.send("y")
        terminal.wait_for(lambda s: "$ echo from-the-shell; exit 3 (exit 3)" in s, timeout=30)
        terminal.send("/save 1 stack.py", "Enter")
        screen = terminal.wait_for(lambda s: "+++ b/stack.py" in s and "+    def push(self, item):" in s, timeout=10)
        keep("save-diff.txt", screen)
        assert (tmp_path / "stack.py").read_text() == stack, "nothing is written before the user confirms"
        terminal.send("y")  # the diff has the focus, for scrolling: y writes
        deadline = time.monotonic() + 10
        while (tmp_path / "stack.py").read_text() == stack and time.monotonic() < deadline:
            time.sleep(0.1)
        terminal.send("What failed?", "Enter")  # the command's output goes with this message
        terminal.wait_for(lambda s: "tok/s" in status_line(s))
        terminal.send("C-q")
        terminal.wait_exit()
    assert (tmp_path / "stack.py").read_text() == ANSWER.split("```python\n")[1].split("```")[0]
    store = Store(assistant_home / "conversations.sqlite3")
    ran = [stored.attachment for stored in store.attachments(conversation.id) if stored.attachment.kind == "command"]
    assert [(a.name, a.exit_code, a.content) for a in ran] == [("echo from-the-shell; exit 3", 3, "from-the-shell\n")]


def test_the_remote_target_killed_mid_answer(assistant_home, demo_set):
    """The set's target on a real `assistant rpc-server`, killed mid-answer: the chat keeps the answer so far (on
    screen and saved), says what happened, says so again while the server is down, and answers once it is back."""
    from assistant import modelsets
    from tests.fixtures.serve import free_port
    from tests.test_rpc import start_rpc_server

    port = free_port()
    server = start_rpc_server(port)
    modelsets.set_target_rpc("demo", f"127.0.0.1:{port}")
    save(ChatSettings(max_tokens=3000, speculation_view=True))
    try:
        with Terminal(assistant_home, width=100, height=40) as terminal:
            screen = terminal.wait_for(lambda s: "ready" in status_line(s), timeout=120)
            assert f"target@127.0.0.1:{port}" in status_line(screen)
            terminal.send("C-b")
            terminal.send("def fibonacci(n):", "C-j", "    if n < 2:", "Enter")
            terminal.wait_for(lambda s: "answering" in status_line(s), timeout=60)
            time.sleep(1)  # 3000 tokens take minutes: the answer is well under way, far from done
            server.kill()
            server.wait()
            screen = terminal.wait_for(lambda s: "dropped the connection while verifying" in words(s)
                                       and "ready" in status_line(s), timeout=60)
            keep("remote-target-lost.txt", screen)
            assert "the answer so far is kept" in words(screen)
            terminal.send("def add(a, b):", "Enter")
            terminal.wait_for(lambda s: "cannot reach the RPC server" in words(s) and "ready" in status_line(s), timeout=60)
            server = start_rpc_server(port)
            terminal.send("def mul(a, b):", "Enter")
            # text of the new answer on screen proves the reconnected server answered (the status line's "1st
            # token" does not: it shows the whole time when no token came)
            terminal.wait_for(lambda s: answered_after(s, "def mul(a, b):"), timeout=120)
            terminal.send("Escape")
            terminal.wait_for(lambda s: "ready" in status_line(s), timeout=60)
            terminal.send("C-q")
            terminal.wait_exit()
    finally:
        server.kill()
        server.wait()
    store = Store(assistant_home / "conversations.sqlite3")
    (conversation,) = store.conversations()
    roles = [(message.role, message.complete) for message in store.messages(conversation.id)]
    cut = store.messages(conversation.id)[1]
    assert roles[:3] == [("user", True), ("assistant", False), ("error", True)] and cut.content.strip()
    assert [role for role, _ in roles[3:]] == ["user", "error", "user", "assistant"]
    assert store.messages(conversation.id)[-1].content.strip()


def test_chat_speed_measures_the_chat_in_tmux_against_generate(assistant_home, demo_set):
    """The issue-40 benchmark runs end to end: `generate` and the chat in tmux answer the same question alike,
    and the chat's conversation is deleted afterwards (the benchmark leaves the user's history as it was)."""
    save(ChatSettings(max_tokens=24))
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "assistant.bench.chat_speed", "--repeats", "1", "--json",
                           "--question", "def fibonacci(n):"], env=dict(os.environ, PYTHONPATH=path),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["same_answer"], result
    assert [len(rates) for rates in result["rates"].values()] == [1, 1] and min(map(min, result["rates"].values())) > 0
    assert result["chat_over_generate"] > 0 and result["base_spread"] == 0
    assert Store(assistant_home / "conversations.sqlite3").conversations() == []

    against = subprocess.run([sys.executable, "-m", "assistant.bench.chat_speed", "--repeats", "1", "--json",
                              "--against-target", "--temperature", "0.7", "--question", "def fibonacci(n):"],
                             env=dict(os.environ, PYTHONPATH=path), capture_output=True, text=True, timeout=600)
    assert against.returncode == 0, against.stderr
    result = json.loads(against.stdout)
    assert list(result["rates"]) == ["chat", "chat, target alone"] and result["chat_over_target"] > 0
    assert load() == ChatSettings(max_tokens=24)  # the user's settings are back
