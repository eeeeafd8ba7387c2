"""The HTTP face of ``assistant serve``: OpenAI's chat-completions and completions endpoints on Starlette.

Handlers only parse, wait and format: generation runs in ``Generations``' thread. A request's response
starts only once its prompt is known to fit (so a bad prompt is a 400, never a broken stream); a client that
leaves, whether waiting in the queue, before its first token or mid-stream, cancels its job."""

from __future__ import annotations

import asyncio
import hmac
import json

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from assistant.serve import constraints, protocol
from assistant.speculative.events import Generation
from assistant.serve.generations import DONE, Generations, QueueFull, Started
from assistant.serve.guard import BrowserGuard
from assistant.serve.protocol import ApiError

DISCONNECT_POLL = 0.2  # seconds between checks that a waiting, non-streaming client is still there
RETRY_AFTER = "2"  # seconds, on 503: busy queue or still loading


class ClientGone(Exception):
    pass


class ChatShape:
    """Where the text goes in chat completions: ``message`` whole, ``delta`` in chunks."""

    object, chunk_object, id_prefix = "chat.completion", "chat.completion.chunk", "chatcmpl"

    @staticmethod
    def opening() -> list[dict]:
        return [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]

    @staticmethod
    def piece(text: str) -> dict:
        return {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}

    @staticmethod
    def ending(reason: str) -> dict:
        return {"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}

    @staticmethod
    def whole(text: str, reason: str) -> dict:
        return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": reason}

    @staticmethod
    def calls_piece(calls: list[dict]) -> dict:
        """The tool calls of a streamed answer, each whole in one delta (clients join the pieces of a call by its
        index, so one piece is a valid stream)."""
        return {"index": 0, "delta": {"tool_calls": [{"index": index, **call} for index, call in enumerate(calls)]},
                "logprobs": None, "finish_reason": None}

    @staticmethod
    def whole_with_calls(content: str, calls: list[dict]) -> dict:
        return {"index": 0, "message": {"role": "assistant", "content": content or None, "tool_calls": calls},
                "logprobs": None, "finish_reason": "tool_calls"}


class CompletionShape:
    """Where the text goes in (legacy) completions: ``text``, whole or in pieces."""

    object, chunk_object, id_prefix = "text_completion", "text_completion", "cmpl"

    @staticmethod
    def opening() -> list[dict]:
        return []

    @staticmethod
    def piece(text: str) -> dict:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": None}

    @staticmethod
    def ending(reason: str) -> dict:
        return {"index": 0, "text": "", "logprobs": None, "finish_reason": reason}

    @staticmethod
    def whole(text: str, reason: str) -> dict:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}


def create_app(generations: Generations, model_name: str, n_ctx: int, api_key: str | None = None,
               max_body: int = 4 << 20, origins=(), hosts=None) -> Starlette:
    """``origins``: web page origins allowed to call (others are refused); ``hosts``: the Host values
    accepted, or None to accept any (see ``guard``)."""
    server = Server(generations, model_name, n_ctx, api_key, max_body)
    routes = [
        Route("/health", server.health, methods=["GET"]),
        Route("/v1/models", server.models, methods=["GET"]),
        Route("/v1/chat/completions", server.chat_completions, methods=["POST"]),
        Route("/v1/completions", server.completions, methods=["POST"]),
    ]
    handlers = {ApiError: _api_error, HTTPException: _http_error, Exception: _unexpected_error}
    return Starlette(routes=routes, exception_handlers=handlers,
                     middleware=[Middleware(BrowserGuard, origins=origins, hosts=hosts)])


class Server:
    def __init__(self, generations: Generations, model_name: str, n_ctx: int, api_key: str | None, max_body: int):
        self.generations, self.model_name, self.n_ctx = generations, model_name, n_ctx
        self.api_key, self.max_body = api_key, max_body
        self.created = protocol.now()

    async def health(self, request: Request) -> Response:
        """No key needed: load balancers and scripts poll it. 503 until the models are loaded."""
        generations = self.generations
        body = {"status": {"ready": "ok"}.get(generations.state, generations.state), "model": self.model_name,
                "generating": generations.busy, "waiting": generations.waiting, "served": generations.served,
                "cancelled": generations.cancelled_count}
        if generations.error:
            body["error"] = generations.error
        status = 200 if generations.state == "ready" else 503
        return JSONResponse(body, status, headers={} if status == 200 else {"Retry-After": RETRY_AFTER})

    async def models(self, request: Request) -> Response:
        self.authorize(request)
        model = {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "assistant",
                 "context_length": self.n_ctx}
        return JSONResponse({"object": "list", "data": [model]})

    async def chat_completions(self, request: Request) -> Response:
        return await self.generate(request, protocol.parse_chat, ChatShape)

    async def completions(self, request: Request) -> Response:
        return await self.generate(request, protocol.parse_completion, CompletionShape)

    # --- one generation ---------------------------------------------------------------------------
    async def generate(self, request: Request, parse, shape) -> Response:
        self.authorize(request)
        generation = parse(await self.read_json(request))
        self.check(generation)
        generations = self.generations
        calls = None  # the target's tool-call format, where the answer may call tools
        if generation.tools and generation.tool_choice != "none":
            from assistant.serve.tool_formats import tool_format

            calls = tool_format(generations.pipeline.target.chat_template)
        generation.grammar = constraints.answer_grammar(generation, calls)
        try:
            job = generations.submit(generation, asyncio.get_running_loop())
        except QueueFull:
            raise ApiError(503, f"the server is busy: {generations.max_waiting} requests are already waiting; "
                           "retry later", code="queue_full", kind="server_busy") from None
        handed_over = False
        try:
            first, *rest = await self.next_watching(request, job)
            if isinstance(first, ApiError):
                raise first
            assert isinstance(first, Started), first
            answer = Answer(shape, self.model_name, generations.pipeline.roles, calls)
            if generation.stream:
                handed_over = True
                return StreamingResponse(self.stream(job, answer, generation.include_usage, rest),
                                         media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
            while not answer.done:
                for event in rest:
                    answer.take(event)
                rest = [] if answer.done else await self.next_watching(request, job)
            if answer.error:
                raise answer.error
            return JSONResponse(answer.whole())
        except ClientGone:
            return Response(status_code=499)  # nobody reads it; uvicorn just closes the connection
        finally:
            if not handed_over:
                generations.cancel(job)  # a no-op once the job is done

    async def stream(self, job, answer: "Answer", include_usage: bool, events: list):
        """Server-Sent Events: one chunk per piece of text (the pieces that arrived together go in one write),
        the finish chunk with our statistics, the usage chunk when asked for, then ``data: [DONE]``.
        Starlette cancels this when the client disconnects."""
        try:
            chunks = answer.opening(include_usage)
            while True:
                for event in events:
                    chunk = answer.take(event, include_usage)
                    if chunk is not None:
                        chunks.append(chunk)
                if answer.done:
                    break
                if chunks:
                    yield b"".join(map(_event, chunks))
                    chunks = []
                events = await job.next_events()
            if answer.error:
                chunks.append(answer.error.body())
            else:
                chunks += answer.closing(include_usage)
            yield b"".join(map(_event, chunks)) + b"data: [DONE]\n\n"
        finally:
            self.generations.cancel(job)

    async def next_watching(self, request: Request, job) -> list:
        """The job's next events; raises ClientGone if the client disconnects meanwhile (checked every
        DISCONNECT_POLL seconds, whether or not events flow)."""
        loop = asyncio.get_running_loop()
        while True:
            if loop.time() >= job.watched + DISCONNECT_POLL:
                job.watched = loop.time()
                if await request.is_disconnected():
                    raise ClientGone()
            events = await job.next_events(DISCONNECT_POLL)
            if events:
                return events

    # --- checks -----------------------------------------------------------------------------------
    def authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.api_key.encode()):
            raise ApiError(401, "missing or wrong API key: send it as 'Authorization: Bearer KEY'",
                           code="invalid_api_key")

    async def read_json(self, request: Request):
        """The body as JSON, at most ``max_body`` bytes. A larger one is read to its end and dropped (up to 16
        times the cap), so the client gets its 413 rather than a broken pipe while still sending."""
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > 16 * self.max_body:
            raise self.too_large()
        body, size = [], 0
        async for part in request.stream():
            size += len(part)
            if size <= self.max_body:
                body.append(part)
            elif size > 16 * self.max_body:
                break
        if size > self.max_body:
            raise self.too_large()
        try:
            return json.loads(b"".join(body))
        except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
            raise ApiError(400, f"the request body is not valid JSON ({error})", code="invalid_json") from None

    def too_large(self) -> ApiError:
        return ApiError(413, f"the request body is larger than {self.max_body} bytes", code="request_too_large")

    def check(self, generation: protocol.GenerationRequest) -> None:
        if generation.model != self.model_name:
            raise ApiError(404, f"model {generation.model!r} is not served here; this server has "
                           f"{self.model_name!r} (GET /v1/models)", "model", "model_not_found")
        if generation.max_tokens is not None and generation.max_tokens >= self.n_ctx:
            raise ApiError(400, f"max_tokens {generation.max_tokens} does not fit the context of {self.n_ctx} "
                           "tokens", "max_tokens", "context_length_exceeded")
        state = self.generations.state
        if state != "ready":
            message = "the models are still loading; retry shortly" if state == "loading" else \
                f"the models could not be loaded: {self.generations.error}"
            raise ApiError(503, message, code="model_loading" if state == "loading" else "model_failed")


class Answer:
    """Gathers one job's events into the response objects of its endpoint. With ``calls`` (a tool-call format)
    the answer's text is read for tool calls at its end; streamed, the text from where a call may begin is held
    back until then."""

    def __init__(self, shape, model_name: str, roles: list[str], calls=None):
        self.shape, self.roles, self.calls = shape, roles, calls
        self.so_far = ""  # streamed with ``calls``: the text generated, of which ``self.shown`` characters went out
        self.shown = 0
        self.base = {"id": protocol.new_id(shape.id_prefix), "created": protocol.now(), "model": model_name}
        self.text = ""  # the whole answer, once it has ended
        self.stats = None
        self.error: ApiError | None = None
        self.done = False

    def take(self, event, include_usage: bool = False) -> dict | None:
        """Record an event; return the chunk to stream for it, if any."""
        if event is DONE:
            self.done = True
        elif isinstance(event, ApiError):
            self.error = event
        elif isinstance(event, Generation):
            self.text, self.stats = event.text, event.stats
            if self.stats.stop_reason == "cancelled":  # only a client still listening sees this: we are stopping
                self.error = ApiError(503, "the answer was cut short: the server is shutting down", code="shutdown")
        elif event.text and self.calls is None:
            return self.chunk([self.shape.piece(event.text)], include_usage)
        elif event.text:
            self.so_far += event.text
            opening = self.calls.call_opening(self.so_far)
            end = len(self.so_far) if opening is None else opening
            if end > self.shown:
                piece, self.shown = self.so_far[self.shown:end], end
                return self.chunk([self.shape.piece(piece)], include_usage)
        return None

    def chunk(self, choices: list[dict], include_usage: bool, **extra) -> dict:
        chunk = {**self.base, "object": self.shape.chunk_object, "choices": choices, **extra}
        if include_usage:
            chunk.setdefault("usage", None)
        return chunk

    def opening(self, include_usage: bool) -> list[dict]:
        choices = self.shape.opening()
        return [self.chunk(choices, include_usage)] if choices else []

    def closing(self, include_usage: bool) -> list[dict]:
        reason = protocol.finish_reason(self.stats)
        chunks = []
        if self.calls is not None:
            content, calls = self.calls.parse(self.text)
            rest = content[self.shown:] if content.startswith(self.so_far[:self.shown]) else ""
            if rest:
                chunks.append(self.chunk([self.shape.piece(rest)], include_usage))
            if calls:
                chunks.append(self.chunk([self.shape.calls_piece(calls)], include_usage))
                reason = "tool_calls"
        chunks.append(self.chunk([self.shape.ending(reason)], include_usage,
                                 speculation=protocol.speculation(self.stats, self.roles)))
        if include_usage:
            chunks.append(self.chunk([], True, usage=protocol.usage(self.stats)))
        return chunks

    def whole(self) -> dict:
        reason = protocol.finish_reason(self.stats)
        choice = self.shape.whole(self.text, reason)
        if self.calls is not None:
            content, calls = self.calls.parse(self.text)
            if calls:
                choice = self.shape.whole_with_calls(content, calls)
        return {**self.base, "object": self.shape.object, "choices": [choice],
                "usage": protocol.usage(self.stats), "speculation": protocol.speculation(self.stats, self.roles)}


def _event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def _api_error(request: Request, error: ApiError) -> Response:
    headers = {"Retry-After": RETRY_AFTER} if error.status == 503 else {}
    if error.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(error.body(), error.status, headers=headers)


async def _http_error(request: Request, error: HTTPException) -> Response:
    message = {404: f"no such endpoint: {request.url.path}",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(error.status_code, str(error.detail))
    return await _api_error(request, ApiError(error.status_code, message, code=f"http_{error.status_code}"))


async def _unexpected_error(request: Request, error: Exception) -> Response:
    """The details go to the server's log (uvicorn prints the traceback), not to whoever asked."""
    return await _api_error(request, ApiError(500, "internal error; the server's log has the details"))
