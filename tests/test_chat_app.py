"""The chat app driven by Pilot against the real engine on the converted bench pair and a real SQLite file;
attachments from real files in a temporary project directory and real shell commands."""

import contextlib
import json
import threading
import time

import pytest
from textual.widgets import ProgressBar

from assistant import attachments, home, modelsets
from assistant.conversation import attached_files, backend
from assistant.conversation import settings as chat_settings
from assistant.conversation.store import Store
from assistant.ui.app import ChatApp
from assistant.ui.components.answerer import Answerer
from assistant.ui.screens.ask import AskScreen, ConfirmScreen, DiffScreen
from assistant.ui.screens.chat import ChatScreen
from assistant.ui.screens.help import HelpScreen
from assistant.ui.widgets.attachment_bar import AttachmentBar
from assistant.ui.widgets.messages import AnswerView, MessageView
from assistant.ui.widgets.prompt_input import PromptInput
from assistant.ui.widgets.status_line import StatusLine, short_path

pytestmark = pytest.mark.anyio

SIZE = (110, 36)
# the demo pair was trained on code to continue: a multi-line snippet gets a long answer, a bare question a short one
QUESTION = "def fibonacci(n):\n    if n < 2:"


@pytest.fixture
def anyio_backend():
    return "asyncio"  # Textual runs on asyncio


def make_app(cwd=None, **changes) -> ChatApp:
    settings = chat_settings.ChatSettings(max_tokens=48, n_ctx=1024)
    for key, value in changes.items():
        setattr(settings, key, value)
    return ChatApp(settings, Store(), cwd=cwd)


async def until(pilot, condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the app"
        await pilot.pause(0.05)


async def settle(pilot):
    """Wait for loading and generation workers to finish and their results to reach the screen."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.1)


async def ask(pilot, text=QUESTION):
    prompt = pilot.app.screen.query_one(PromptInput)
    await pilot.click(PromptInput)
    if len(text) > 100:
        prompt.text = text  # as if pasted: thousands of key presses would only slow the test down
        await pilot.press("enter")
    else:
        await pilot.press(*["ctrl+j" if char == "\n" else char for char in text], "enter")
    await settle(pilot)


def saved_messages():
    store = Store()
    conversation = store.latest_conversation()
    return conversation, store.messages(conversation.id)


async def test_send_streams_an_answer_saved_with_its_provenance(demo_set):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        await pilot.press(*"Write a function", "ctrl+j", *"that adds two numbers")  # Ctrl+J: a newline
        assert screen.query_one(PromptInput).text == "Write a function\nthat adds two numbers"
        await pilot.press("enter")
        assert screen.query_one(PromptInput).text == ""
        await settle(pilot)
        (answer,) = screen.query(AnswerView)
        assert answer.text.strip()
        status = screen.query_one(StatusLine)
        assert status.model == "demo · target ← mxfp4 ← draft"
        assert status.state == "ready"
        assert "tok/s" in status.speed and "α" in status.speed
        assert status.context.startswith("ctx ") and not status.context.startswith("ctx 0/")
        conversation, messages = saved_messages()
        assert conversation.title == "Write a function"
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[0].content == "Write a function\nthat adds two numbers"
        assert messages[1].content == answer.text and messages[1].complete
        stats = messages[1].stats
        assert stats["stop_reason"] in ("max_tokens", "eos"), stats  # the whole answer, not a cut one
        assert stats["new_tokens"] == 48 if stats["stop_reason"] == "max_tokens" else 0 < stats["new_tokens"] < 48
        assert "".join(text for _, text in messages[1].provenance) == answer.text
        assert {level for level, _ in messages[1].provenance} - {0}, "some tokens came from the drafts"


async def test_window_is_interactive_while_models_load(demo_set):
    # Behaviour, not a stopwatch: keys reach the input while the models are still loading (a time limit here
    # fails on a busy CI machine; load speed belongs in benchmarks).
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        status = app.screen.query_one(StatusLine)
        assert status.loading and status.state.startswith("loading 3 levels")
        assert status.query(ProgressBar), "loading shows its bar"
        await pilot.press("h", "i")
        assert app.screen.query_one(PromptInput).text == "hi"
        await settle(pilot)
        assert not status.loading and status.state == "ready"
        assert not app.screen.query(ProgressBar), "no bar left animating, hidden, once loaded"


async def test_model_loads_run_one_at_a_time_and_the_last_request_wins(demo_set, monkeypatch):
    """Switching sets while one loads never loads two at once, and the window ends on the last choice."""
    from assistant.conversation import backend

    modelsets.register("demo-copy", demo_set.levels)
    real = backend.load_pipeline
    running, most, loaded = [0], [0], []

    def load(model_set, settings):
        running[0] += 1
        most[0] = max(most[0], running[0])
        try:
            time.sleep(0.2)  # a load long enough for the next request to arrive during it
            pipeline = real(model_set, settings)
            loaded.append((model_set.name, pipeline))
            return pipeline
        finally:
            running[0] -= 1

    monkeypatch.setattr(backend, "load_pipeline", load)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        for name in ("demo-copy", "demo", "demo-copy"):
            screen.settings_editor.switch_model_set(name)
        await settle(pilot)
        status = screen.query_one(StatusLine)
        assert most[0] == 1, "two model sets were loading at once"
        assert screen.model_set.name == "demo-copy" and status.model.startswith("demo-copy")
        assert status.state == "ready" and screen.loader.pipeline is loaded[-1][1] and loaded[-1][0] == "demo-copy"
        assert all(pipeline.levels == [] for _, pipeline in loaded[:-1]), "superseded pipelines are closed"
        await ask(pilot)
        assert screen.query_one(AnswerView).text.strip()


async def test_esc_stops_and_keeps_what_was_shown(demo_set, monkeypatch):
    """Esc mid-answer: the worker is held right after it hands its first pieces to the screen until Esc has been
    pressed, so the answer is still streaming when the stop arrives (checked: an answer done before its first
    timed flush fails). The screen draws them meanwhile (the worker never waits for it)."""
    budget = 400
    held, release = threading.Event(), threading.Event()
    show = Answerer.show

    def show_then_hold(answerer, view, pieces):
        show(answerer, view, pieces)
        if pieces and not held.is_set():
            held.set()
            release.wait(timeout=60)

    monkeypatch.setattr(Answerer, "show", show_then_hold)
    app = make_app(max_tokens=budget)
    async with app.run_test(size=SIZE) as pilot:
        try:
            await settle(pilot)
            await pilot.press(*"def fibonacci(n):", "ctrl+j", *"    if n < 2:", "enter")
            await until(pilot, held.is_set)
            screen = app.screen
            await until(pilot, lambda: screen.query_one(AnswerView).text)
            _, messages = saved_messages()
            assert messages[1].stats is None and not messages[1].complete, "the answer ended before Esc"
            assert screen.answerer.generating and screen.query_one(AnswerView).text
            await pilot.press("escape")
        finally:
            release.set()
        await settle(pilot)
        answer = screen.query_one(AnswerView)
        assert answer.note == "stopped"
        _, messages = saved_messages()
        assert messages[1].content == answer.text and not messages[1].complete
        assert messages[1].stats["stop_reason"] == "cancelled"
        assert messages[1].stats["new_tokens"] < budget


async def test_regenerate_replaces_the_last_answer(demo_set):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot)
        first = app.screen.query_one(AnswerView).text
        await pilot.press("ctrl+r")
        await settle(pilot)
        (again,) = app.screen.query(AnswerView)
        assert again.text == first  # greedy: the same answer, from scratch
        _, messages = saved_messages()
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[1].id == again.message_id


async def test_new_chat_and_resume_after_restart(demo_set):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "first question")
        first_answer = app.screen.query_one(AnswerView).text
        await pilot.press("ctrl+n")
        assert not app.screen.query(".message")
        await ask(pilot, "second question")
        titles = [c.title for c in Store().conversations()]
        assert titles == ["second question", "first question"]
    app = make_app()  # a restart resumes the latest conversation
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        users = [view.content for view in app.screen.query(MessageView) if view.role == "user"]
        assert users == ["second question"]
        options = app.screen.query_one("#conversation-options")
        assert [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)] == [
            "second question", "first question"]
        options.focus()
        await pilot.press("down", "enter")  # open the older one from the list
        await pilot.pause(0.1)
        assert app.screen.query_one(AnswerView).text == first_answer
        await ask(pilot, "follow-up")
        _, messages = saved_messages()
        assert [m.content for m in messages if m.role == "user"] == ["first question", "follow-up"]


async def test_speculation_view_on_and_off(demo_set):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot)
        screen = app.screen
        legend = screen.query_one("#legend")
        answer = screen.query_one(AnswerView)
        assert not legend.display and not answer.query_one(".speculation").display
        await pilot.press("f3")
        assert legend.display and answer.query_one(".speculation").display
        assert not answer.query_one("Markdown").display
        assert "small draft (accepted)" in str(legend.render())
        assert "Chain: target" in str(legend.render()) and "predicted ms/token" in str(legend.render())
        spans = answer.query_one(".speculation").render().spans
        assert len({span.style for span in spans}) >= 2, "tokens from several levels, each in its colour"
        assert json.loads(home.config_path().read_text())["chat"]["speculation_view"] is True
        await pilot.press("f3")
        assert not legend.display and answer.query_one("Markdown").display
    assert chat_settings.load().speculation_view is False


async def test_backend_errors_show_as_messages_and_the_app_recovers(demo_set, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(demo_set.target.path.read_bytes()[:4096])  # a truncated model file
    modelsets.register("broken", [modelsets.Level("target", broken)], make_default=True)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await ask(pilot)
        screen = app.screen
        assert screen.query_one(StatusLine).state == "no model"
        errors = [view.content for view in screen.query(MessageView) if view.role == "error"]
        assert errors and "broken" in errors[-1]
        assert not screen.query(AnswerView)  # the empty answer is not kept
        screen.settings_editor.switch_model_set("demo")
        await settle(pilot)
        await pilot.press("ctrl+r")  # the question again, now with a working model set: the error goes
        await settle(pilot)
        assert screen.query_one(AnswerView).text
        assert not [view for view in screen.query(MessageView) if view.role == "error"]
        # a message longer than the whole context is refused by the real pipeline, shown as an error
        await ask(pilot, "x " * 1200)
        (error,) = [view.content for view in screen.query(MessageView) if view.role == "error"]
        assert "context" in error and screen.query_one(StatusLine).state == "ready"
        await ask(pilot, "still works?")  # the long message is left out of the prompt from now on
        assert screen.query(AnswerView).last().text
    _, messages = saved_messages()
    assert [m.role for m in messages] == ["user", "assistant", "user", "error", "user", "assistant"]


async def test_palette_help_and_conversation_management(demo_set):
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "Write a function")
        screen = app.screen
        # copy a code block or the whole answer through the palette
        await pilot.press("ctrl+p")
        await pilot.press(*"copy last answer")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert app.clipboard == screen.query_one(AnswerView).text
        # rename through the palette's dialog
        await pilot.press("ctrl+p", *"rename conversation")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert isinstance(app.screen, AskScreen)
        await pilot.press("ctrl+a", "ctrl+k", *"Adder", "enter")  # to the start, delete to the end, type
        await pilot.pause(0.1)
        title = Store().conversation(screen.conversations.current_id).title
        assert title == "Adder"
        # search filters the list by message text
        screen.action_search_conversations()
        await pilot.press(*"no such text")
        await pilot.pause(0.1)
        assert screen.query_one("#conversation-options").option_count == 0
        await pilot.press(*["backspace"] * 12)
        assert screen.query_one("#conversation-options").option_count == 1
        # export
        screen.conversations.export()
        (exported,) = (home.data_dir() / "exports").iterdir()
        assert exported.read_text().startswith(f"# {title}\n")
        # help lists the keys with their binding ids
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        # delete, after confirming
        screen.conversations.delete()
        await pilot.pause(0.1)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.click("#confirm")
        await pilot.pause(0.1)
        assert Store().conversations() == [] and not screen.query(".message")


async def test_the_list_renames_with_f2_and_deletes_with_the_delete_key(demo_set):
    """Each key of the conversation list asks for its own action, about the conversation highlighted there."""
    store = Store()
    for first_message in ("older", "newer"):
        store.add_message(store.new_conversation().id, "user", first_message)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen, depth = app.screen, len(app.screen_stack)
        options = screen.query_one("#conversation-options")

        def highlight(title):
            options.focus()
            options.highlighted = next(i for i in range(options.option_count)
                                       if str(options.get_option_at_index(i).prompt) == title)

        highlight("older")
        await pilot.press("f2")
        await until(pilot, lambda: isinstance(app.screen, AskScreen))
        assert app.screen.query_one("#answer").value == "older" and len(app.screen_stack) == depth + 1
        await pilot.press("ctrl+a", "ctrl+k", *"renamed", "enter")
        await until(pilot, lambda: app.screen is screen)
        assert {c.title for c in Store().conversations()} == {"renamed", "newer"}
        highlight("renamed")
        await pilot.press("delete")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "“renamed”" in str(app.screen.query_one(".question").render()) and len(app.screen_stack) == depth + 1
        await pilot.press("y")
        await until(pilot, lambda: app.screen is screen)
        assert [c.title for c in Store().conversations()] == ["newer"]
        assert screen.conversations.current.title == "newer" and screen.query(MessageView)  # still open


async def test_keymap_from_the_config_file_remaps_bindings(demo_set):
    chat_settings.save(chat_settings.ChatSettings(max_tokens=8, n_ctx=1024, keymap={"chat.new": "ctrl+t"}))
    app = ChatApp()
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "hello")
        await pilot.press("ctrl+n")
        assert app.screen.query(".message")
        await pilot.press("ctrl+t")
        assert not app.screen.query(".message")


# attachments: @path, /add, /run and !, /drop, /save

STACK = "class Stack:\n    def __init__(self):\n        self.items = []\n"


@pytest.fixture
def project(tmp_path):
    """A working directory with a little code in it."""
    (tmp_path / "stack.py").write_text(STACK)
    (tmp_path / "queue.py").write_text("from collections import deque\n")
    (tmp_path / "notes.txt").write_text("push and pop\n")
    return tmp_path


def recorded(app):
    """Every notification the app shows, as (severity, message)."""
    seen = []
    notify = app.notify

    def recording(message, **kwargs):
        seen.append((kwargs.get("severity", "information"), str(message)))
        return notify(message, **kwargs)

    app.notify = recording
    return seen


def prompts_sent(monkeypatch):
    """The messages each answer was generated from, as the Answerer got them (before fitting the context)."""
    sent = []
    start = Answerer.start

    def recording(answerer, view, prompt, settings):
        sent.append(prompt.messages())
        start(answerer, view, prompt, settings)

    monkeypatch.setattr(Answerer, "start", recording)
    return sent


@contextlib.asynccontextmanager
async def chat_in(project):
    """The app working in ``project``, models loaded: (pilot, its chat screen, the notifications it shows)."""
    app = make_app(cwd=project)
    notes = recorded(app)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        yield pilot, app.screen, notes


async def enter(pilot, text):
    """Put ``text`` into the input (as if typed) and press Enter; then wait for what it started."""
    prompt = pilot.app.screen.query_one(PromptInput)
    prompt.text = text
    prompt.move_cursor(prompt.document.end)
    await pilot.press("enter")
    await pilot.pause(0.05)


async def confirm(pilot, yes=True):
    await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen))
    await pilot.click("#confirm" if yes else "#cancel")
    await pilot.pause(0.05)


def user_views(screen):
    return [view for view in screen.query(MessageView) if view.role == "user"]


async def test_at_file_attaches_it_and_the_model_gets_its_text(demo_set, project, monkeypatch):
    sent = prompts_sent(monkeypatch)
    async with chat_in(project) as (pilot, screen, _):
        assert screen.query_one(StatusLine).directory == short_path(project)
        await pilot.click(PromptInput)
        await pilot.press(*"Explain @st", "tab")  # Tab completes the path from the working directory
        assert screen.query_one(PromptInput).text == "Explain @stack.py "
        await pilot.press(*"briefly", "enter")
        await settle(pilot)
        assert screen.query_one(AnswerView).text.strip(), "the answer streamed"
        (view,) = user_views(screen)
        assert view.content == "Explain @stack.py briefly" and view.attachments == "Attached: stack.py (3 lines)"
        conversation, messages = saved_messages()
        assert messages[0].content == "Explain @stack.py briefly"  # what the user typed, as typed
        (stored,) = Store().attachments(conversation.id)
        assert (stored.message_id, stored.directory, stored.attachment.name, stored.attachment.content) == (
            messages[0].id, str(project), "stack.py", STACK)
        (prompt,) = sent
        attached = attachments.read_file("stack.py", project)
        assert prompt[-1] == {"role": "user", "content": attachments.with_attachments(messages[0].content, [attached])}
        assert STACK.rstrip() in prompt[-1]["content"]
        assert prompt[0] == {"role": "system", "content": attached_files.working_directory(project)}
        # the model's view is rebuilt from the store alone
        kept = Store().attachments(conversation.id)
        assert backend.prompt_messages(conversation.system_prompt, messages[:1], kept, project) == prompt


async def test_add_a_glob_then_drop_one_and_all(demo_set, project, monkeypatch):
    sent = prompts_sent(monkeypatch)
    async with chat_in(project) as (pilot, screen, _):
        bar = screen.query_one(AttachmentBar)
        assert not bar.display
        await enter(pilot, "/add *.py")
        assert [a.name for a in screen.attachments.pending] == ["queue.py", "stack.py"] and bar.display
        shown = str(bar.render())
        assert "queue.py (1 line)" in shown and "stack.py (3 lines)" in shown and "context tokens left" in shown
        stack = screen.attachments.pending[1]
        tokens = len(screen.loader.pipeline.tokenize(stack.render()))  # counted with the model's tokenizer
        assert f"stack.py (3 lines)  {tokens} tokens" in shown
        assert screen.query_one(PromptInput).text == "" and not Store().conversations()  # nothing sent
        await enter(pilot, "/drop queue.py")
        assert [a.name for a in screen.attachments.pending] == ["stack.py"]
        await enter(pilot, "/drop")
        assert screen.attachments.pending == [] and not bar.display
        await enter(pilot, "/add stack.py notes.txt")
        await enter(pilot, "What do these do?")
        await settle(pilot)
        assert screen.attachments.pending == [] and not bar.display
        conversation, _ = saved_messages()
        assert [s.attachment.name for s in Store().attachments(conversation.id)] == ["stack.py", "notes.txt"]
        assert "File `notes.txt`" in sent[-1][-1]["content"]
        # /drop takes earlier attachments out of what the model sees from now on
        await enter(pilot, "/drop")
        assert all(s.dropped for s in Store().attachments(conversation.id))
        assert user_views(screen)[0].attachments.endswith("notes.txt (1 line) [dropped]")
        await enter(pilot, "And now?")
        await settle(pilot)
        assert all("File `" not in message["content"] for message in sent[-1])
        assert sent[-1][0]["role"] != "system"  # no files left to name


async def test_run_asks_first_and_attaches_output_and_exit_code(demo_set, project, monkeypatch):
    sent = prompts_sent(monkeypatch)
    async with chat_in(project) as (pilot, screen, notes):
        bar = screen.query_one(AttachmentBar)
        await enter(pilot, "!touch ran.txt")
        assert isinstance(pilot.app.screen, ConfirmScreen) and pilot.app.screen.command == "touch ran.txt"
        await confirm(pilot, yes=False)  # refused: nothing runs
        await settle(pilot)
        assert not (project / "ran.txt").exists() and screen.attachments.pending == []
        await enter(pilot, "/run echo checked; ls *.py; exit 3")
        await confirm(pilot)
        await settle(pilot)
        (output,) = screen.attachments.pending
        assert (output.kind, output.exit_code, output.content) == ("command", 3, "checked\nqueue.py\nstack.py\n")
        assert ("warning", "echo checked; ls *.py; exit 3 exited with code 3; its output is attached.") in notes
        assert "$ echo checked; ls *.py; exit 3 (exit 3)" in str(bar.render())
        await enter(pilot, "Why did it fail?")
        await settle(pilot)
        conversation, messages = saved_messages()
        (stored,) = Store().attachments(conversation.id)
        assert stored.attachment.exit_code == 3 and stored.attachment.content == output.content
        assert "(exit code 3):\n```\nchecked\nqueue.py" in sent[-1][-1]["content"]
        assert user_views(screen)[0].attachments == "Attached: $ echo checked; ls *.py; exit 3 (exit 3)"
        assert screen.query_one(AnswerView).text


async def test_a_command_that_never_ends_is_stopped_by_esc_or_its_timeout(demo_set, project):
    async with chat_in(project) as (pilot, screen, notes):
        await enter(pilot, "!sleep 30")
        await confirm(pilot)
        assert screen.attachments.runner.running
        began = time.monotonic()
        await pilot.press("escape")
        await settle(pilot)
        assert time.monotonic() - began < 10 and not screen.attachments.runner.running
        assert notes[-1][0] == "warning" and notes[-1][1].startswith("sleep 30: stopped by the user after ")
        bar = screen.query_one(AttachmentBar)
        pending = screen.attachments.pending
        assert [(a.name, a.exit_code) for a in pending] == [("sleep 30", None)]  # what it printed goes along
        screen.settings.command_timeout = 0.5
        await enter(pilot, "!sleep 30")
        await confirm(pilot)
        await settle(pilot)
        assert ("warning", "sleep 30: timed out: still running after 0.5 s, stopped; its output so far is attached "
                           "(/drop takes it out).") in notes
        assert screen.attachments.pending[0].content == "[timed out: still running after 0.5 s, stopped]\n"
        assert "$ sleep 30 (stopped)" in str(bar.render())
        await ask(pilot)  # the chat goes on
        assert screen.query_one(AnswerView).text


@pytest.mark.parametrize("text,reason", [
    ("Explain @missing.py", "missing.py: no such file"),
    ("Explain @pkg/", "pkg/: is a directory"),
    ("Explain @logo.png", "logo.png: a binary file, not text"),
    ("Explain @latin.txt", "latin.txt: not UTF-8 text"),
    ("Explain @huge.py", "huge.py: 292 KiB is over the 256 KiB limit"),
    ("/add pkg", "pkg: is a directory"),
    ("/add *.rs", "*.rs: matches no file"),
    ("/add nowhere.py", "nowhere.py: no such file"),
])
async def test_what_cannot_be_attached_is_named_and_nothing_is_lost(demo_set, project, text, reason):
    (project / "pkg").mkdir()
    (project / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    (project / "latin.txt").write_bytes("café".encode("latin-1"))
    (project / "huge.py").write_text("x = 1\n" * 50000)
    async with chat_in(project) as (pilot, screen, notes):
        await enter(pilot, text)
        errors = [message for severity, message in notes if severity == "error"]
        assert errors and errors[-1].startswith(reason)
        assert screen.query_one(PromptInput).text == text, "what was typed is back in the input"
        assert not Store().conversations() and not screen.query(".message")
        await enter(pilot, "Explain @stack.py")  # the chat still works
        await settle(pilot)
        assert screen.query_one(AnswerView).text and user_views(screen)[0].attachments


async def test_decorators_and_unknown_commands_are_not_attachments(demo_set, project):
    async with chat_in(project) as (pilot, screen, notes):
        await enter(pilot, "/nosuch thing")
        assert notes[-1][0] == "warning" and notes[-1][1].startswith("/nosuch: no such command")
        assert screen.query_one(PromptInput).text == "/nosuch thing"
        await enter(pilot, "@property\ndef size(self):")
        await settle(pilot)
        (view,) = user_views(screen)
        assert view.content == "@property\ndef size(self):" and not view.attachments


ANSWER = ("Two versions:\n\n```python\ndef push(self, item):\n    self.items.append(item)\n```\n\n"
          "```python\nclass Stack:\n    def __init__(self):\n        self.items = []\n\n"
          "    def push(self, item):\n        self.items.append(item)\n```\n")


async def test_save_shows_the_diff_and_writes_only_when_confirmed(demo_set, project):
    store = Store()
    conversation = store.new_conversation()
    store.add_message(conversation.id, "user", "Add push")
    answer = store.add_message(conversation.id, "assistant", "", complete=False)
    store.update_answer(answer.id, ANSWER, [(0, ANSWER)], None, True)
    (project / "pkg").mkdir()
    async with chat_in(project) as (pilot, screen, notes):
        await enter(pilot, "/save 2 stack.py")
        assert isinstance(pilot.app.screen, DiffScreen)
        diff = pilot.app.screen.diff
        assert diff.startswith("--- a/stack.py\n+++ b/stack.py\n") and "+    def push(self, item):\n" in diff
        await confirm(pilot, yes=False)
        assert (project / "stack.py").read_text() == STACK, "declined: nothing written"
        await enter(pilot, "/save 2 stack.py")
        await confirm(pilot)
        pushed = STACK + "\n    def push(self, item):\n        self.items.append(item)\n"
        assert (project / "stack.py").read_text() == pushed
        await enter(pilot, "/save 1 push.py")  # a new file asks too
        assert isinstance(pilot.app.screen, DiffScreen) and pilot.app.screen.diff.startswith("--- /dev/null\n")
        await confirm(pilot)
        assert (project / "push.py").read_text() == "def push(self, item):\n    self.items.append(item)\n"
        for text, reason in [("/save 3 x.py", "The last answer has 2 code blocks"),
                             ("/save 1 pkg", "pkg: is a directory"),
                             ("/save 1 none/x.py", "none/x.py: no such directory"),
                             ("/save x.py", "Usage: /save N PATH")]:
            await enter(pilot, text)
            assert not isinstance(pilot.app.screen, DiffScreen) and notes[-1][1].startswith(reason), (text, notes[-1])
            assert screen.query_one(PromptInput).text == text
            screen.query_one(PromptInput).clear()
    assert sorted(path.name for path in project.iterdir()) == ["notes.txt", "pkg", "push.py", "queue.py", "stack.py"]


async def test_attachments_come_back_on_resume_and_a_changed_file_is_reread(demo_set, project, monkeypatch):
    sent = prompts_sent(monkeypatch)
    async with chat_in(project) as (pilot, _, _):
        await enter(pilot, "What is @stack.py for?")
        await settle(pilot)
    (project / "stack.py").write_text(STACK + "\n    def pop(self):\n        return self.items.pop()\n")
    async with chat_in(project) as (pilot, screen, notes):  # a restart resumes the conversation
        (view,) = user_views(screen)
        assert view.attachments == "Attached: stack.py (3 lines)"
        await enter(pilot, "And now?")
        await settle(pilot)
        assert ("information", "stack.py changed since it was attached: re-read.") in notes
        assert user_views(screen)[1].attachments == "Attached: stack.py (6 lines, changed: re-read)"
        conversation, _ = saved_messages()
        first, again = Store().attachments(conversation.id)
        assert again.attachment.changed and "def pop" in again.attachment.content
        assert "def pop" not in first.attachment.content
        assert "File `stack.py` (changed since it was first attached):" in sent[-1][-1]["content"]
        (project / "stack.py").unlink()  # gone: the chat says so and goes on
        await enter(pilot, "Still there?")
        await settle(pilot)
        assert any(severity == "warning" and "stack.py: no such file" in message for severity, message in notes)
        assert len(screen.query(AnswerView)) == 3 and screen.query(AnswerView).last().text
