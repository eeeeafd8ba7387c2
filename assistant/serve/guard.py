"""Keeps the web pages a user happens to visit away from the server.

A browser lets any page send requests to 127.0.0.1, and a page whose domain is re-pointed at 127.0.0.1
(DNS rebinding) can even read the answers. Browsers always say which page a request comes from (Origin)
and which name they connected to (Host): requests from a page are refused unless its origin is allowed
(`--allow-origin`), and on loopback only loopback names are accepted as Host. Clients that are not
browsers (editors, SDKs, curl) send no Origin and pass."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse, Response

from assistant.errors import AssistantError
from assistant.serve.protocol import ApiError

PREFLIGHT_MAX_AGE = "600"  # seconds a browser may reuse a preflight answer
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def origin_option(value: str) -> str:
    """An --allow-origin value as browsers send it: scheme://host[:port], lower case, no path."""
    if value == "null":  # what sandboxed frames and file:// pages send
        return value
    parts = urlsplit(value.strip().lower())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username:
        raise AssistantError(f"--allow-origin {value!r}: give an origin as a browser sends it, "
                             "e.g. http://localhost:3000 (scheme, host and port, no path)")
    return f"{parts.scheme}://{parts.netloc}"


def loopback_hosts(bound: str, port: int) -> set[str]:
    """The Host values a browser sends for this machine's loopback names at ``port`` (the port is left
    out for port 80)."""
    names = set(LOOPBACK_NAMES) | {f"[{bound}]" if ":" in bound else bound}
    return {f"{name}:{port}" for name in names} | (names if port == 80 else set())


class BrowserGuard:
    """ASGI middleware: refuses other origins' requests and, when ``hosts`` is given, unknown Host names;
    answers CORS preflights and marks responses for the allowed origins."""

    def __init__(self, app, origins=(), hosts=None):
        self.app = app
        self.origins = frozenset(origins)
        self.hosts = None if hosts is None else frozenset(host.lower() for host in hosts)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if self.hosts is not None and host.lower() not in self.hosts:
            refusal = ApiError(403, f"Host {host!r} is not this machine's loopback address: the server "
                               "listens on loopback only and accepts 127.0.0.1, localhost or [::1] with its port",
                               code="host_not_allowed")
            return await _respond(refusal, scope, receive, send)
        origin = headers.get("origin")
        if origin is None:
            return await self.app(scope, receive, send)
        if origin.lower() not in self.origins:
            refusal = ApiError(403, f"requests from web pages at {origin} are refused; if you trust that page, "
                               f"start the server with --allow-origin {origin}", code="origin_not_allowed")
            return await _respond(refusal, scope, receive, send)
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            preflight = Response(status_code=204, headers={
                "Access-Control-Allow-Origin": origin, "Vary": "Origin",
                "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
                "Access-Control-Allow-Headers": headers.get("access-control-request-headers", ""),
                "Access-Control-Max-Age": PREFLIGHT_MAX_AGE})
            return await preflight(scope, receive, send)

        async def send_marked(message):
            if message["type"] == "http.response.start":
                marked = MutableHeaders(scope=message)
                marked["Access-Control-Allow-Origin"] = origin
                marked.append("Vary", "Origin")
            await send(message)

        return await self.app(scope, receive, send_marked)


async def _respond(error: ApiError, scope, receive, send) -> None:
    await JSONResponse(error.body(), error.status)(scope, receive, send)
