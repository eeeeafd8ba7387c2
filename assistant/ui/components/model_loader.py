"""Loads a model set in a worker thread and posts ``Loaded``, so the chat screen only shows the outcome.

Loads run one at a time (two model sets in memory at once could exhaust it) and the latest request wins:
a pipeline whose request was superseded while it loaded is closed here, never posted on."""

from __future__ import annotations

import threading

from textual import on, work
from textual.message import Message

from assistant.conversation import backend
from assistant.errors import AssistantError
from assistant.ui.components.component import Component


class ModelLoader(Component):
    """Holds the loaded pipeline; never shown."""

    class Loaded(Message):
        """The latest request's outcome: a pipeline, or an error a user can act on."""

        def __init__(self, pipeline, error: str | None, request: int):
            super().__init__()
            self.pipeline = pipeline
            self.error = error
            self.request = request

    def __init__(self):
        super().__init__()
        self.pipeline = None
        self.error: str | None = None
        self.ready = threading.Event()  # set once the latest load finished, successfully or not
        self.closing = False  # set on unmount: a load still running then closes what it loaded
        self._lock = threading.Lock()
        self._request = 0

    def load(self, model_set, settings) -> None:
        """Load ``model_set`` cut to the levels ``settings`` ask for; the current pipeline is closed first."""
        old = self._supersede()
        self._load(model_set, settings, old, self._request)

    def fail(self, error: str) -> None:
        """A request that cannot start (no such model set): close the current pipeline and report ``error``."""
        old = self._supersede()
        if old is not None:
            old.close()
        self.post_message(self.Loaded(None, error, self._request))

    def _supersede(self):
        old, self.pipeline = self.pipeline, None
        self.ready.clear()
        self._request += 1  # any load still running is superseded from here on
        return old

    @work(thread=True, group="load")
    def _load(self, model_set, settings, old, request: int) -> None:
        with self._lock:
            if old is not None:
                old.close()
            if request != self._request:  # a newer request came while this one waited
                return
            try:
                pipeline, error = backend.load_pipeline(model_set, settings), None
            except AssistantError as failure:
                pipeline, error = None, str(failure)
        if (self.closing or not self.post_message(self.Loaded(pipeline, error, request))) and pipeline is not None:
            pipeline.close()  # the screen is going: no one would show or close it

    @on(Loaded)
    def _keep_latest(self, message: Loaded) -> None:
        if message.request != self._request:  # superseded while loading: the newer request's load follows
            message.stop()
            if message.pipeline is not None:
                message.pipeline.close()
            return
        self.pipeline, self.error = message.pipeline, message.error
        self.ready.set()

    def on_unmount(self) -> None:
        self.closing = True
