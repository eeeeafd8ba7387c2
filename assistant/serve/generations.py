"""One generation at a time on the loaded model set, the rest waiting in a bounded first-in-first-out queue.

A llama.cpp context serves one sequence at a time, so a single thread owns the pipeline: it loads it, then
takes jobs in arrival order. Each job's events (Started, the TokenEvents, the finished Generation or an
ApiError, then DONE) travel back to the asyncio loop through its own queue; a job whose client left is
cancelled (the pipeline checks between verification rounds) or, still waiting, simply removed."""

from __future__ import annotations

import asyncio
import collections
import sys
import threading
import traceback
from dataclasses import dataclass

from assistant.engine.grammar import GrammarError
from assistant.errors import AssistantError
from assistant.serve.protocol import ApiError, GenerationRequest

DONE = object()  # the last event of every job


@dataclass(frozen=True)
class Started:
    """The prompt fitted and generation began: from here on the response is a success."""

    prompt_tokens: int


class QueueFull(Exception):
    pass


class Job:
    """One request's generation. Events cross from the generation thread to the event loop in batches: the
    thread appends and wakes the loop only if no wake-up is already on its way, so a verification round's
    burst of accepted tokens costs one wake-up and one network write, not one per token."""

    def __init__(self, request: GenerationRequest, loop: asyncio.AbstractEventLoop):
        self.request = request
        self.cancelled = threading.Event()
        self.watched = loop.time()  # when the HTTP side last checked that the client is still there
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: list = []
        self._signalled = False
        self._ready = asyncio.Event()

    def emit(self, event) -> None:
        """Called from the generation thread; a closed loop (server shutting down) cancels the job."""
        with self._lock:
            self._pending.append(event)
            if self._signalled:
                return
            self._signalled = True
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:
            self.cancelled.set()

    async def next_events(self, timeout: float | None = None) -> list:
        """Every event emitted since the last call, waiting for one if there is none; [] after ``timeout``."""
        while True:
            with self._lock:
                events, self._pending, self._signalled = self._pending, [], False
            if events:
                return events
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except asyncio.TimeoutError:
                return []


class Generations:
    """Owns the pipeline of one model set; ``submit`` jobs from the event loop, the thread runs them."""

    def __init__(self, load, make_prompt, max_waiting: int, default_temperature: float = 0.0, on_failure=None):
        """``load()`` returns the Pipeline; ``make_prompt(pipeline, request)`` its prompt token ids."""
        self._load, self._make_prompt = load, make_prompt
        self.max_waiting = max_waiting
        self.default_temperature = default_temperature
        self._on_failure = on_failure
        self.pipeline = None
        self.state, self.error = "loading", None
        self.served = self.cancelled_count = 0  # finished jobs; of them, stopped because their client left
        self._waiting: collections.deque[Job] = collections.deque()
        self._running: Job | None = None
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="generation", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, request: GenerationRequest, loop) -> Job:
        job = Job(request, loop)
        with self._wake:
            if len(self._waiting) >= self.max_waiting:
                raise QueueFull()
            self._waiting.append(job)
            self._wake.notify()
        return job

    def cancel(self, job: Job) -> None:
        """The client is gone: drop the job if it is still waiting, stop it at the next round if running."""
        job.cancelled.set()
        with self._wake:
            if job in self._waiting:
                self._waiting.remove(job)
                self.cancelled_count += 1

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def busy(self) -> bool:
        return self._running is not None

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel everything, let the thread close the pipeline, and wait for it."""
        with self._wake:
            self._stopping = True
            for job in self._waiting:
                job.cancelled.set()
            self._waiting.clear()
            if self._running is not None:
                self._running.cancelled.set()
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # --- the generation thread --------------------------------------------------------------------
    def _work(self) -> None:
        try:
            self.pipeline = self._load()
        except Exception as error:  # AssistantError or a native failure: the server cannot serve
            self.state, self.error = "failed", str(error)
            if self._on_failure:
                self._on_failure(self.error)
            return
        self.state = "ready"
        try:
            while True:
                with self._wake:
                    while not self._waiting and not self._stopping:
                        self._wake.wait()
                    if self._stopping:
                        return
                    job = self._running = self._waiting.popleft()
                try:
                    self._run(job)
                finally:
                    with self._wake:
                        self._running = None
                    self.served += 1
        finally:
            self.pipeline.close()

    def _run(self, job: Job) -> None:
        from assistant.speculative import Sampling

        request, pipeline = job.request, self.pipeline
        param = "messages" if request.messages is not None else "prompt"  # where a prompt error points
        try:
            try:
                prompt = self._make_prompt(pipeline, request)
            except AssistantError as error:
                raise ApiError(400, str(error), param) from None
            room = pipeline.n_ctx - len(prompt)
            max_tokens = request.max_tokens if request.max_tokens is not None else room
            if room < 1 or max_tokens > room:
                raise ApiError(
                    400, f"the context holds {pipeline.n_ctx} tokens, but the prompt has {len(prompt)} and "
                    f"{max_tokens} more were asked for: shorten the prompt or ask for fewer tokens",
                    param, "context_length_exceeded")
            temperature = self.default_temperature if request.temperature is None else request.temperature
            sampling = Sampling(temperature, request.top_k, request.top_p, request.seed)
            try:
                answer = pipeline.generate(prompt, sampling, max_tokens, request.stop, job.cancelled, request.grammar,
                                           special_text=bool(request.tools) and request.tool_choice != "none")
            except GrammarError as error:
                raise ApiError(400, str(error), "response_format" if request.response_format else "tools") from None
            job.emit(Started(len(prompt)))
            for event in answer:
                job.emit(event)
            job.emit(answer)  # finished: the whole answer and its Stats
            if job.cancelled.is_set():
                self.cancelled_count += 1
        except ApiError as error:
            job.emit(error)
        except Exception:  # whatever a request does, the server stays up; the details stay in its log
            traceback.print_exc(file=sys.stderr)
            job.emit(ApiError(500, "generation failed; the server's log has the details"))
        finally:
            job.emit(DONE)
