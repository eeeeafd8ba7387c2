"""Layout snapshots of the main screen (with and without the speculation view), the palette and help.

The conversation is written to the real store beforehand and the real models are loaded; nothing timed
is on screen, so the pictures are deterministic. Update with `pytest --snapshot-update`."""

from pathlib import Path

import pytest

from assistant.conversation.settings import ChatSettings
from assistant.conversation.store import Store
from assistant.ui.app import ChatApp

SIZE = (100, 30)
ANSWER = [
    (2, "Here is a function that adds two numbers:\n\n```python\ndef add("),
    (0, "a"),
    (1, ", b):\n    "),
    (2, "return a + b\n```\n\nCall it as `add(1, 2)`"),
    (0, "."),
]


@pytest.fixture
def chat_app(demo_set):
    store = Store()
    conversation = store.new_conversation()
    store.add_message(conversation.id, "user", "Write a function that adds two numbers")
    answer = store.add_message(conversation.id, "assistant", "", complete=False)
    store.update_answer(answer.id, "".join(text for _, text in ANSWER), ANSWER, None, True)
    other = store.new_conversation()
    store.add_message(other.id, "user", "Parse a CSV file")
    store.touch(conversation.id)

    def make(**changes):
        return ChatApp(ChatSettings(n_ctx=1024, **changes), store, cwd=str(Path.home() / "project"))  # shown as ~/project

    return make


async def models_loaded(pilot):
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.2)
    steady_cursors(pilot)


def steady_cursors(pilot):
    """A blinking cursor is on or off depending on the instant of the picture: keep it on."""
    for widget in pilot.app.screen.query("Input, TextArea"):
        widget.cursor_blink = False
        # TextArea caches its lines under one key for "blink off" and "no blink": a line drawn in the blink's
        # off phase would be shown again without its cursor. A style update empties that cache.
        widget.notify_style_update()


def test_main_screen(chat_app, snap_compare):
    assert snap_compare(chat_app(), terminal_size=SIZE, run_before=models_loaded)


def test_main_screen_with_speculation_view(chat_app, snap_compare):
    assert snap_compare(chat_app(speculation_view=True), terminal_size=SIZE, run_before=models_loaded)


def test_command_palette(chat_app, snap_compare):
    async def open_palette(pilot):
        await models_loaded(pilot)
        await pilot.press("ctrl+p", *"toggle speculation")
        await pilot.pause(1.0)  # the palette searches in the background
        steady_cursors(pilot)
        await pilot.pause(0.1)

    assert snap_compare(chat_app(), terminal_size=SIZE, run_before=open_palette)


def test_help_screen(chat_app, snap_compare):
    async def open_help(pilot):
        await models_loaded(pilot)
        await pilot.press("f1")
        await pilot.pause(0.3)

    assert snap_compare(chat_app(), terminal_size=SIZE, run_before=open_help)
