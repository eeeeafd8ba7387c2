"""A streamed answer in the chat (Pilot, the real engine on the converted bench pair): the screen is refreshed a
few times a second, however fast the tokens come, and ends showing exactly what the model generated."""

import time

import pytest
from textual.widgets import Markdown

from assistant.conversation.settings import ChatSettings
from assistant.conversation.store import Store
from assistant.speculative import Pipeline
from assistant.ui.app import ChatApp
from assistant.ui.components.answerer import Answerer
from assistant.ui.literal import visible
from assistant.ui.widgets.messages import AnswerView
from assistant.ui.widgets.prompt_input import PromptInput

pytestmark = pytest.mark.anyio

QUESTION = "def fibonacci(n):\n    if n < 2:"  # code to continue: the bench pair answers at length
COST = 0.015  # seconds of the screen's CPU added to each update by the costly-drawing test


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def generations(monkeypatch):
    """Every Generation the chat's pipeline returns: what the model produced, token by token."""
    made = []
    chat = Pipeline.chat

    def recording(self, *args, **kwargs):
        made.append(chat(self, *args, **kwargs))
        return made[-1]

    monkeypatch.setattr(Pipeline, "chat", recording)
    return made


@pytest.fixture
def refreshes(monkeypatch):
    """The time of every update of an answer on screen that brought new text."""
    times = []
    add_pieces = AnswerView.add_pieces

    async def counting(self, pieces):
        if pieces:
            times.append(time.monotonic())
        await add_pieces(self, pieces)

    monkeypatch.setattr(AnswerView, "add_pieces", counting)
    return times


async def answer(pilot, generations):
    """Send QUESTION once the model has loaded; returns when the answer has ended and reached the screen."""
    app = pilot.app
    await app.workers.wait_for_complete()
    asked = len(generations)
    app.screen.query_one(PromptInput).text = QUESTION
    await pilot.press("enter")
    deadline = time.monotonic() + 120
    # the generation has started (it is recorded) and ended, and the screen has had its last pieces
    while len(generations) == asked or generations[-1].stats is None or app.screen.answerer.generating:
        assert time.monotonic() < deadline, "the answer did not end"
        await pilot.pause(0.05)


def shown_markdown(view: AnswerView) -> str:
    return view.query_one(Markdown).source


async def test_a_long_answer_is_refreshed_by_time_not_by_tokens_and_ends_complete(demo_set, generations, refreshes):
    settings = ChatSettings(max_tokens=400, n_ctx=1024)
    app = ChatApp(settings, Store())
    async with app.run_test(size=(110, 36)) as pilot:
        await answer(pilot, generations)
        (view,) = app.screen.query(AnswerView)
        (generation,) = generations
        tokens = len(generation.tokens)
        assert tokens >= 200, f"a long answer was expected, got {tokens} tokens"
        # exactly what the model generated, in the view, in the Markdown on screen and in the store
        assert view.text == generation.text and generation.text.strip()
        assert shown_markdown(view) == visible(generation.text)
        store = Store()
        assert store.messages(store.latest_conversation().id)[-1].content == generation.text
        # one refresh per REFRESH_SECONDS at most (and the last pieces at the end), whatever the token rate
        seconds = refreshes[-1] - refreshes[0]
        assert len(refreshes) <= seconds / Answerer.REFRESH_SECONDS + 2, (len(refreshes), seconds, tokens)
        assert len(refreshes) < tokens / 2, (len(refreshes), tokens)


async def test_the_speculation_view_shows_the_whole_answer_streamed_hidden_or_shown(demo_set, generations):
    settings = ChatSettings(max_tokens=120, n_ctx=1024)
    app = ChatApp(settings, Store())
    async with app.run_test(size=(110, 36)) as pilot:
        await answer(pilot, generations)  # streamed with the Markdown view shown
        await pilot.press("f3")  # the coloured view, coloured only now
        await pilot.pause(0.1)
        await answer(pilot, generations)  # streamed with the coloured view shown
        first, second = app.screen.query(AnswerView)
        for view, generation in zip((first, second), generations):
            speculation = view.query_one(".speculation")
            assert speculation.display and speculation.visual.plain == visible(generation.text)



async def test_costly_drawing_slows_the_refreshes_down(demo_set, generations, refreshes, monkeypatch):
    """Each update made to cost 15 ms more of the screen's CPU (as a long conversation on screen does): the
    screen then waits long enough to keep its share of a core to Answerer.SCREEN_SHARE, and still ends
    complete."""
    add_pieces = AnswerView.add_pieces  # the counting one

    async def costly(self, pieces):
        if pieces:
            began = time.thread_time()
            while time.thread_time() - began < COST:
                pass
        await add_pieces(self, pieces)

    monkeypatch.setattr(AnswerView, "add_pieces", costly)
    app = ChatApp(ChatSettings(max_tokens=1500, n_ctx=2048), Store())  # long enough to tell the paces apart
    async with app.run_test(size=(110, 36)) as pilot:
        await answer(pilot, generations)
        (view,) = app.screen.query(AnswerView)
        (generation,) = generations
        assert view.text == generation.text and shown_markdown(view) == visible(generation.text)
        seconds = refreshes[-1] - refreshes[0]
        slowest = COST / Answerer.SCREEN_SHARE
        assert slowest >= 2 * Answerer.REFRESH_SECONDS  # else the shortest wait would decide
        assert seconds > 2 * slowest, f"the answer took {seconds:.2f} s: too short to tell"
        assert len(refreshes) <= seconds / slowest + 2, (len(refreshes), seconds)
