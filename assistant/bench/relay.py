"""A TCP relay that delays what it forwards, counts the bytes and can go silent: a network in user space.

The remote-target benchmark and tests put it between the chain and ``ggml-rpc-server`` to add round-trip time
(``tc netem`` needs a kernel module that a container may lack), to measure the bytes a verification round
sends each way, and to imitate a link that drops without a word (``freeze``: nothing more is delivered and no
connection is closed).
"""

from __future__ import annotations

import heapq
import socket
import threading
import time

CHUNK = 1 << 16


class Relay:
    """Listens on ``host``:``port`` (0: any free port) and forwards each connection to ``upstream``."""

    def __init__(self, upstream: tuple[str, int], delay_ms: float = 0.0, host: str = "127.0.0.1", port: int = 0):
        """``delay_ms``: added round-trip time, half on the way there and half on the way back."""
        self.upstream = upstream
        self.one_way = delay_ms / 2000.0
        self.sent = 0  # bytes towards the server
        self.received = 0  # bytes back from it
        self._flowing = threading.Event()
        self._flowing.set()
        self._listener = socket.create_server((host, port))
        self.endpoint = "%s:%d" % self._listener.getsockname()[:2]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.sent, self.received

    def freeze(self) -> None:
        """Deliver nothing more, close nothing: a silent drop."""
        self._flowing.clear()

    def close(self) -> None:
        self._listener.close()
        for connection in self._sockets:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            connection.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            for connection in (client, server):
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sockets.append(connection)
            self._pipe(client, server, "sent")
            self._pipe(server, client, "received")

    def _pipe(self, source: socket.socket, destination: socket.socket, counter: str) -> None:
        """Two threads per direction: one reads and stamps each chunk with its delivery time, one delivers."""
        queue: list[tuple[float, int, bytes]] = []
        ready = threading.Condition()

        def read() -> None:
            order = 0
            while True:
                try:
                    data = source.recv(CHUNK)
                except OSError:
                    data = b""
                with ready:
                    heapq.heappush(queue, (time.monotonic() + self.one_way, order, data))
                    order += 1
                    ready.notify()
                if not data:
                    return

        def deliver() -> None:
            while True:
                with ready:
                    while not queue:
                        ready.wait()
                    due, _, data = queue[0]
                    wait = due - time.monotonic()
                    if wait > 0:
                        ready.wait(wait)
                        continue
                    heapq.heappop(queue)
                self._flowing.wait()  # forever once frozen: the link went silent
                if not data:
                    try:
                        destination.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                with self._lock:  # counted first: whoever reads the data can rely on the count
                    setattr(self, counter, getattr(self, counter) + len(data))
                try:
                    destination.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=deliver, daemon=True).start()
