"""Generates one answer in a worker thread, streaming it into its ``AnswerView``, and posts ``Finished``.

The answer is saved as it streams (``backend.generate``) and a piece reaches the screen only once committed,
so nothing shown is ever lost; any backend failure arrives as ``Finished.error``, never as a crash.
The screen takes the pieces a few times a second, as a reader follows them (``answer_feed``)."""

from __future__ import annotations

import threading
from functools import partial

from textual import on, work
from textual.message import Message

from assistant.conversation import backend
from assistant.conversation.store import Store
from assistant.errors import AssistantError
from assistant.ui.components.answer_feed import AnswerFeed, RefreshPace
from assistant.ui.components.component import Component
from assistant.ui.components.model_loader import ModelLoader
from assistant.ui.widgets.messages import AnswerView


class Answerer(Component):
    """Runs the answers on the pipeline ``loader`` holds; never shown."""

    REFRESH_SECONDS = 0.1  # the shortest time between two updates of the answer on screen
    SLOWEST_REFRESH_SECONDS = 1.0  # the longest, however costly drawing is
    SCREEN_SHARE = 0.05  # of one core, the most the screen's thread should take while an answer streams

    class Finished(Message):
        """An answer ended: its statistics, or an error, and the context in use afterwards."""

        def __init__(self, view: AnswerView, stats: dict | None, error: str | None, context: tuple[int, int] | None):
            super().__init__()
            self.view = view
            self.stats = stats
            self.error = error
            self.context = context

    def __init__(self, loader: ModelLoader):
        super().__init__()
        self.loader = loader
        self.generating = False
        self.cancel = threading.Event()
        self.closing = False  # set on unmount: the worker then closes the pipeline instead of reporting
        self.feed = AnswerFeed()
        self._refresher = None

    def start(self, view: AnswerView, prompt: backend.ChatPrompt, settings) -> None:
        """Answer ``prompt`` into ``view`` (its message is already saved), once the model has loaded."""
        self.cancel = threading.Event()
        self.generating = True
        self.feed = AnswerFeed()
        pace = RefreshPace(self.REFRESH_SECONDS, self.SLOWEST_REFRESH_SECONDS, self.SCREEN_SHARE)
        self._refresher = self.set_timer(self.REFRESH_SECONDS, partial(self._refresh, view, self.feed, pace))
        self._generate(view, prompt, settings, self.cancel)

    def stop(self) -> bool:
        """Cancel the answer being generated, keeping what it said; False when there is none."""
        if self.generating:
            self.cancel.set()
        return self.generating

    def busy(self) -> bool:
        """Whether an answer is being generated, telling the user so: most changes wait until it ends."""
        if self.generating:
            self.notify("Still answering: press Esc to stop it first.")
        return self.generating

    def show(self, view: AnswerView, pieces: list[tuple[int, str]]) -> None:
        """Hand committed pieces of the answer ``view`` shows to the screen, from the generation thread, without
        waiting: they are shown at the next refresh."""
        self.feed.put(pieces)

    async def _refresh(self, view: AnswerView, feed: AnswerFeed, pace: RefreshPace) -> None:
        if feed is not self.feed:
            return  # the answer ended: its last pieces went with Finished
        await view.add_pieces(feed.take())
        if feed is self.feed:
            self._refresher = self.set_timer(pace.next_delay(), partial(self._refresh, view, feed, pace))

    @work(thread=True, group="generate")
    def _generate(self, view: AnswerView, prompt: backend.ChatPrompt, settings, cancel: threading.Event) -> None:
        loader = self.loader
        while not loader.ready.wait(0.1):
            if cancel.is_set():
                self.post_message(self.Finished(view, {"stop_reason": "cancelled"}, None, None))
                return
        pipeline = loader.pipeline
        stats = error = context = None
        store = Store(self.app.store.path)  # SQLite connections stay in the thread that made them
        try:
            if pipeline is None:
                raise AssistantError(loader.error or "no model is loaded")
            stats = backend.generate(pipeline, store, view.message_id, prompt, settings, cancel, partial(self.show, view))
            context = (pipeline.context_used, pipeline.n_ctx)
        except AssistantError as failure:
            error = str(failure)
        except Exception as failure:  # never let a backend bug kill the app
            error = f"unexpected error: {failure!r}"
        finally:
            store.close()
        if (self.closing or not self.post_message(self.Finished(view, stats, error, context))) and pipeline is not None:
            pipeline.close()  # the screen is going and left the pipeline to this answer

    @on(Finished)
    async def _ended(self, message: Finished) -> None:
        """The last pieces go on screen before the screen hears the answer ended."""
        feed, self.feed = self.feed, AnswerFeed()
        if self._refresher is not None:
            self._refresher.stop()
            self._refresher = None
        await message.view.add_pieces(feed.take())
        self.generating = False

    def on_unmount(self) -> None:
        self.closing = True
        self.cancel.set()
