"""The server's listening socket, bound before the models load: a taken port fails at once, not minutes later,
and a bench can serve on a free port (0) and read back which one it got."""

from __future__ import annotations

import errno
import socket

from assistant.errors import AssistantError


def listen(host: str, port: int) -> socket.socket:
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    except OSError as error:
        hint = ": pick another with --port" if getattr(error, "errno", None) == errno.EADDRINUSE else ""
        raise AssistantError(f"cannot listen on {host}:{port} ({error.strerror or error}){hint}") from None
    listener.listen(128)
    listener.set_inheritable(True)
    return listener
