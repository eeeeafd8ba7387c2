"""Text that is not ours is shown literally wherever the chat shows it: random Unicode and markup-like strings
(Hypothesis) through the status line, the conversation list, a message, an answer, the command confirmation, a
notification and the palette. No exception, and what the widget renders is the text given, its control characters drawn as
visible symbols (written raw they would drive the terminal). Destructive confirmations start on Cancel."""

import asyncio
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, example, given, settings, strategies as st
from textual.command import CommandInput, CommandList, CommandPalette, DiscoveryHit, Hit
from textual.geometry import Region
from textual.widgets import Button, OptionList, Static
from textual.widgets._toast import Toast

from assistant.conversation.codeblocks import code_blocks
from assistant.conversation.settings import ChatSettings
from assistant.conversation.store import Store, title_from
from assistant.ui.app import ChatApp
from assistant.ui.screens.ask import ConfirmScreen
from assistant.ui.widgets.attachment_bar import AttachmentBar
from assistant.ui.widgets.messages import AnswerView, MessageView
from assistant.ui.widgets.prompt_input import PromptInput
from assistant.ui.widgets.status_line import short_path

SIZE = (100, 30)
NO_MODELS = "no-such-set"  # the display is under test: the load fails at once, as for a user with no models

MARKUP_LIKE = ["[", "[/", "]", "[b]", "[/b]", "[/]", "[@click=app.quit]", "[/INST]", "[INST]", "[$accent]",
               "[red]", "[a-z]*", "\\", "\\[", "$x", "`", "*", "# ", "\x1b[31m", "\x1b]0;title\x07", "\x00", "\r",
               "\x7f", "\x85", "\x9b2J", "\u202e", "\u200f", "\u2066", "שלום", "مرحبا", "👨‍👩‍👧", "漢字", "\t", "\n"]
fragments = st.one_of(st.sampled_from(MARKUP_LIKE), st.text(max_size=12))
short_text = st.lists(fragments, min_size=1, max_size=10).map("".join)
long_line = short_text.map(lambda s: s.replace("\n", " ")).filter(bool).map(lambda s: (s * (10_000 // len(s) + 1))[:10_000])
outside_text = st.one_of(short_text, short_text, long_line).filter(str.strip)


def shown(text: str) -> str:
    """What the screen must show for ``text``: every character as itself, except the control characters,
    which appear as visible symbols (C0 and DEL as Unicode's control pictures, C1 as <U+0085>)."""
    out = []
    for char in text:
        code = ord(char)
        if char in "\n\t":
            out.append(char)
        elif code < 0x20:
            out.append(chr(0x2400 + code))
        elif code == 0x7F:
            out.append("\u2421")
        elif 0x80 <= code < 0xA0:
            out.append(f"<U+{code:04X}>")
        else:
            out.append(char)
    return "".join(out)


def shown_exactly(command: str) -> str:
    """A command as its confirmation shows it: ``shown``, and the invisible format characters (bidirectional
    overrides and isolates, zero-width joiners and marks) named, so the order on screen is the order it runs."""
    import unicodedata

    return "".join(f"<U+{ord(c):04X}>" if unicodedata.category(c) == "Cf" else c for c in shown(command))


def plain(visual) -> str:
    return visual.plain if hasattr(visual, "plain") else str(visual)


def on_terminal(widget) -> str:
    """The characters ``widget`` sends to the terminal, line after line."""
    region = Region(0, 0, widget.size.width, widget.size.height)
    return "".join(strip.text for strip in widget.render_lines(region))


def raw_controls(text: str) -> list[str]:
    return [char for char in text if ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0]


async def until(pilot, condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the app"
        await pilot.pause(0.02)


def notifications(pilot) -> list[str]:
    return [plain(toast.render()) for toast in pilot.app.screen.query(Toast)]


def palette_entries(pilot, kind=DiscoveryHit) -> list[str]:
    """The palette's entries as rendered: those listed before typing (DiscoveryHit) or found by a search (Hit)."""
    commands = pilot.app.screen.query_one(CommandList)
    options = [commands.get_option_at_index(i) for i in range(commands.option_count)]
    return [plain(commands._get_visual(option)) for option in options if type(option.hit) is kind]


async def enter(pilot, text: str) -> str:
    """Type ``text`` into the input (as if pasted) and press Enter; what the input held is what was given."""
    prompt = pilot.app.screen.query_one(PromptInput)
    prompt.text = text
    given = prompt.text
    await pilot.press("enter")
    await pilot.pause(0.05)
    return given


async def show_everywhere(text: str, directory: Path) -> None:
    store = Store(directory / "conversations.sqlite3")
    conversation = store.new_conversation()
    store.add_message(conversation.id, "user", text)
    answer_text = f"About {text}:\n\n```\n{text}\n```\n"
    answer = store.add_message(conversation.id, "assistant", "", complete=False)
    store.update_answer(answer.id, answer_text, [(0, answer_text)], None, True)
    store.touch(conversation.id)
    name = text.replace("/", "").replace("\x00", "")[:40].strip()  # as much of it as a directory name can hold
    cwd = directory / (name if name not in ("", ".", "..") else "x")
    cwd.mkdir()
    app = ChatApp(ChatSettings(model_set=NO_MODELS, system_prompt=text, speculation_view=True), store,
                  cwd=str(cwd))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen.query_one("#status-state", Static).render().plain == "no model")
        await pilot.pause(0.05)

        # the working directory in the status line
        status = screen.query_one("#status-directory", Static)
        assert plain(status.render()) == shown(short_path(cwd))
        assert not raw_controls(on_terminal(status))

        # the conversation's title in the list
        options = screen.query_one("#conversation-options", OptionList)
        assert plain(options._get_visual(options.get_option_at_index(0))) == shown(title_from(text))
        assert not raw_controls(on_terminal(options))

        # the message, and the answer in the speculation view (plain) and as Markdown
        user = next(view for view in screen.query(MessageView) if view.role == "user")
        body = user.query_one(".body", Static)
        assert plain(body.render()) == shown(text)
        assert not raw_controls(on_terminal(body))
        view = screen.query_one(AnswerView)
        assert plain(view.query_one(".speculation", Static).render()) == shown(answer_text)
        view.set_speculation_view(False)
        await pilot.pause(0.05)
        assert not raw_controls(on_terminal(view))

        # a notification naming what the user typed
        given = await enter(pilot, "/drop " + text)
        named = given.removeprefix("/drop").strip()
        await until(pilot, lambda: any(f"Nothing attached is named {shown(named)}." in note
                                       for note in notifications(pilot)))
        for toast in screen.query(Toast):
            assert not raw_controls(on_terminal(toast))

        # the confirmation shows exactly what would run; Enter cancels
        given = await enter(pilot, "!" + text)
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query(".command Static"))
        dialog = app.screen
        command = dialog.query_one(".command Static", Static)
        assert plain(command.render()) == shown_exactly(given[1:].strip())
        await until(pilot, lambda: app.focused is dialog.query_one("#cancel", Button))
        await pilot.press("enter")
        await until(pilot, lambda: app.screen is screen)
        assert not screen.attachments.runner.running

        # palette entries: the system prompt in a help line, the answer's code in a title, found by a search
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette) and app.screen.query(CommandList)
                    and any(entry.startswith("Set system prompt\n") for entry in palette_entries(pilot)))
        (entry,) = [entry for entry in palette_entries(pilot) if entry.startswith("Set system prompt\n")]
        assert entry == "Set system prompt\n" + shown(f"Now: {text[:40]}")
        (block, *_) = code_blocks(answer_text)
        title = f"Copy code block 1 ({block.label})"
        app.screen.query_one(CommandInput).value = "copy code block"  # as if typed, searched once
        await until(pilot, lambda: any(entry.startswith("Copy code block 1") for entry in palette_entries(pilot, Hit)))
        (entry,) = [entry for entry in palette_entries(pilot, Hit) if entry.startswith("Copy code block 1")]
        assert entry == shown(title) + "\nCopy this block of the last answer"
        assert not raw_controls(on_terminal(app.screen.query_one(CommandList)))
        await pilot.press("escape")
    store.close()


# No shrinking: an example costs a second of a real app, and the example that failed is reported as it is.
@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=outside_text)
@example(text="[/INST] what does this tag mean?")
@example(text="rm -rf build/[a-z]* [@click=app.quit] \x1b]0;title\x07 \u202eexe.txt")
def test_outside_text_is_shown_as_given_everywhere(text):
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(show_everywhere(text, Path(directory)))


async def confirm_run_then_delete(directory: Path) -> None:
    store = Store(directory / "conversations.sqlite3")
    app = ChatApp(ChatSettings(model_set=NO_MODELS), store, cwd=str(directory))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await pilot.pause(0.1)
        for attempt in ("cancel with Enter", "run with y"):
            await enter(pilot, "!echo [/]")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query(".command Static"))
            dialog = app.screen
            assert plain(dialog.query_one(".command Static", Static).render()) == "echo [/]"
            await until(pilot, lambda: app.focused is dialog.query_one("#cancel", Button))
            await pilot.press("enter" if attempt == "cancel with Enter" else "y")
            await until(pilot, lambda: app.screen is screen)
            if attempt == "cancel with Enter":
                await pilot.pause(0.2)
                assert not screen.attachments.runner.running and screen.attachments.pending == []
        await until(pilot, lambda: screen.attachments.pending)
        (output,) = screen.attachments.pending
        assert (output.name, output.exit_code, output.content) == ("echo [/]", 0, "[/]\n")
        assert "$ echo [/] (exit 0)" in plain(screen.query_one(AttachmentBar).render())

        conversation = store.new_conversation()
        store.add_message(conversation.id, "user", "[/INST] keep me")
        screen.conversations.refresh_list()
        screen.conversations.delete(conversation.id)
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.query(".question"))
        dialog = app.screen
        assert plain(dialog.query_one(".question", Static).render()) == "Delete “[/INST] keep me” and all its messages?"
        await until(pilot, lambda: app.focused is dialog.query_one("#cancel", Button))
        await pilot.press("enter")
        await until(pilot, lambda: app.screen is screen)
        assert [c.title for c in store.conversations()] == ["[/INST] keep me"], "Enter kept it"
    store.close()


def test_command_confirmation_shows_brackets_and_enter_cancels(tmp_path):
    """`!echo [/]` once crashed the app (its text read as markup): it is shown as typed, Enter cancels (the
    focus starts on Cancel), `y` runs it; the delete dialog likewise keeps the conversation on Enter."""
    asyncio.run(confirm_run_then_delete(tmp_path))
