"""The chat against runaway commands, special files, links and long conversations, driven by Pilot on the real
engine: memory stays bounded and output is kept, children are ended, refusals are one line and the window
stays responsive, /save writes through a link, and turns left out of the context are named as left out."""

import asyncio
import os
import threading
import time

import pytest
from textual import events

from assistant.conversation import backend
from assistant.conversation import settings as chat_settings
from assistant.conversation.store import Store
from assistant.ui.components import attachments
from assistant.ui.screens.ask import DiffScreen
from assistant.ui.widgets.messages import AnswerView
from assistant.ui.widgets.prompt_input import PromptInput
from tests.test_attachments import process_gone, sparse_gigabyte
from tests.test_chat_app import ANSWER, STACK, chat_in, confirm, enter, project, settle, until, user_views  # noqa: F401

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"  # Textual runs on asyncio


def resident_bytes() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


async def test_yes_for_ten_seconds_keeps_memory_bounded_and_its_last_output(demo_set, project):
    async with chat_in(project) as (pilot, screen, notes):
        await enter(pilot, "/timeout ten")
        assert notes[-1] == ("error", "/timeout: 'ten' is not a number of seconds")
        assert screen.query_one(PromptInput).text == "/timeout ten"
        await enter(pilot, "/timeout 10")
        assert notes[-1] == ("information", "Commands are now stopped after 10 s.")
        assert chat_settings.load().command_timeout == 10  # saved with the other settings
        await enter(pilot, "!yes")
        await confirm(pilot)
        before = peak = resident_bytes()
        while screen.attachments.runner.running:
            peak = max(peak, resident_bytes())
            await pilot.pause(0.1)
        await settle(pilot)
        assert peak - before < 50 * 1024 * 1024
        (output,) = screen.attachments.pending
        head, _, tail = output.content.partition("\n")
        assert head.startswith("[… the first ") and head.endswith(" bytes cut …]")
        assert tail == "y\n" * (32 * 1024) + "[timed out: still running after 10 s, stopped]\n"
        assert notes[-1] == ("warning", "yes: timed out: still running after 10 s, stopped; its output so far is "
                                        "attached (/drop takes it out).")


async def test_stopping_a_command_ends_the_children_it_left_in_the_background(demo_set, project):
    async with chat_in(project) as (pilot, screen, notes):
        await enter(pilot, "!sleep 100 & echo $! > child.pid; echo started; sleep 100")
        await confirm(pilot)
        await until(pilot, lambda: (project / "child.pid").exists() and (project / "child.pid").read_text())
        await pilot.press("escape")
        await settle(pilot)
        assert not screen.attachments.runner.running and process_gone(int((project / "child.pid").read_text()))
        (output,) = screen.attachments.pending
        assert output.content.startswith("started\n[stopped by the user after ")


@pytest.mark.parametrize("text,reason", [
    ("Explain @/dev/zero", "/dev/zero: is a character device, not a regular file"),
    ("Explain @pipe", "pipe: is a FIFO (named pipe), not a regular file"),
    ("Explain @pkg/", "pkg/: is a directory (attach its files, e.g. /add pkg/*.py)"),
    ("Explain @big.log", "big.log: 1024 MiB is over the 256 KiB limit for an attachment (attach a smaller part)"),
    ("/add pipe", "pipe: is a FIFO (named pipe), not a regular file"),
])
async def test_special_files_are_refused_in_one_line_and_the_chat_goes_on(demo_set, project, text, reason):
    os.mkfifo(project / "pipe")
    (project / "pkg").mkdir()
    sparse_gigabyte(project / "big.log")
    async with chat_in(project) as (pilot, screen, notes):
        await enter(pilot, text)
        await settle(pilot)
        assert [message for severity, message in notes if severity == "error"] == [reason]
        assert screen.query_one(PromptInput).text == text and not Store().conversations()
        await enter(pilot, "Explain @stack.py")
        await settle(pilot)
        assert screen.query_one(AnswerView).text and user_views(screen)[0].attachments


async def meanwhile(condition, timeout=5.0):
    """Wait until ``condition()`` holds while the app goes on running (asserting it does within ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the app did not get there in time"
        await asyncio.sleep(0.02)


async def test_files_are_read_off_the_window_thread_which_keeps_taking_keys(demo_set, project, monkeypatch):
    reading, release, readers = threading.Event(), threading.Event(), []
    read_file = attachments.read_file

    def slow_read(name, cwd):  # a file on a slow disk or network mount
        readers.append(threading.current_thread())
        reading.set()
        release.wait(30)
        return read_file(name, cwd)

    monkeypatch.setattr(attachments, "read_file", slow_read)
    async with chat_in(project) as (pilot, screen, _):
        prompt = screen.query_one(PromptInput)
        prompt.text = "Explain @stack.py"
        prompt.move_cursor(prompt.document.end)
        # keys sent as the terminal sends them, and waits that do not wait for the screen: Pilot's would until
        # the screen has finished what it does, and so would hide whether the window stays responsive meanwhile
        prompt.post_message(events.Key("enter", None))
        await meanwhile(reading.is_set)
        for key in "next":
            prompt.post_message(events.Key(key, key))
        await meanwhile(lambda: prompt.text == "next")
        assert not user_views(screen), "still reading"
        release.set()
        await settle(pilot)
        assert readers and threading.main_thread() not in readers
        (view,) = user_views(screen)
        assert view.attachments == "Attached: stack.py (3 lines)" and screen.query_one(PromptInput).text == "next"


async def test_save_through_a_link_shows_its_target_and_keeps_the_link(demo_set, project):
    (project / "real").mkdir()
    (project / "stack.py").rename(project / "real" / "stack.py")
    (project / "stack.py").symlink_to("real/stack.py")
    store = Store()
    conversation = store.new_conversation()
    store.add_message(conversation.id, "user", "Add push")
    answer = store.add_message(conversation.id, "assistant", "", complete=False)
    store.update_answer(answer.id, ANSWER, [(0, ANSWER)], None, True)
    async with chat_in(project) as (pilot, screen, notes):
        await enter(pilot, "/save 2 stack.py")
        dialog = pilot.app.screen
        assert isinstance(dialog, DiffScreen) and "stack.py (a link: its target " in dialog.question
        assert "real/stack.py" in dialog.question and " class Stack:\n" in dialog.diff
        await confirm(pilot)
        assert (project / "stack.py").is_symlink() and os.readlink(project / "stack.py") == "real/stack.py"
        pushed = STACK + "\n    def push(self, item):\n        self.items.append(item)\n"
        assert (project / "real" / "stack.py").read_text() == pushed
        assert notes[-1][1].startswith("Wrote code block 2 to stack.py (to ") and notes[-1][1].endswith("stack.py).")


async def test_a_long_chat_names_the_file_whose_turn_no_longer_fits(demo_set, project, monkeypatch):
    fitted = []
    fit_context = backend.fit_context

    def recording(pipeline, prompt, max_tokens):
        fitted.append(fit_context(pipeline, prompt, max_tokens))
        return fitted[-1]

    monkeypatch.setattr(backend, "fit_context", recording)
    async with chat_in(project) as (pilot, screen, _):
        tokenize = screen.loader.pipeline.tokenize
        big = "".join(f"value_{n} = {n} * {n}\n" for n in range(400))
        while len(tokenize(big)) > 480:  # about half the context (1024 tokens, 48 of them for the answer)
            big = big[:big.rindex("value_")]
        (project / "big.py").write_text(big)
        question = "x " * 420
        while len(tokenize(question)) > 420:
            question = question[:-2]
        await enter(pilot, "Explain @big.py")
        await settle(pilot)
        assert "File `big.py`" in fitted[0][-1]["content"] and "the files they attach" in fitted[0][0]["content"]
        screen.query_one(PromptInput).text = question  # as if pasted
        await pilot.press("enter")
        await settle(pilot)
        system, *turns = fitted[-1]
        assert turns[-1]["content"] == question
        assert all("big.py" not in turn["content"] for turn in turns), "the file's turn was left out"
        assert "the files they attach" not in system["content"]
        assert "Older turns were left out to fit the context, and with them the file big.py" in system["content"]
        assert len(screen.query(AnswerView)) == 2 and screen.query(AnswerView).last().text
