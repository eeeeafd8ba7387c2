"""A context whose model lives on another machine, driven through a worker process whose failures are not ours.

ggml's RPC client ends the whole process when a connection fails or the server speaks another protocol
version, and waits forever on a peer that went silent. The coordinator must outlive both: the answer so far is
kept and the chat stays usable. So the remote model and its context live in a worker process; ``RemoteContext``
has Context's surface, sends each evaluation's new tokens over a pipe and reads the logits from a file mapping
both processes share. If the worker dies, or an evaluation passes its deadline (the worker is then killed),
``evaluate`` raises ``RemoteTargetLost``; the next evaluation starts a new worker, which connects and loads again.

Before any worker starts, ``probe`` speaks the protocol's first message itself, so an unreachable host, a busy
server (it serves one client at a time) or an incompatible build is a clear error instead of an abort.
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import weakref
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from assistant.engine.context import check_evaluation, common_prefix
from assistant.engine.devices import split_endpoint, split_endpoints
from assistant.errors import AssistantError

# ggml-rpc's handshake: command byte 14 (HELLO), a 64-bit size and 24 bytes of transport capabilities (zero:
# plain TCP); the reply is a 64-bit size and major, minor, patch, padding and 24 bytes of capabilities.
HELLO = 14
CAPABILITIES = 24
PROTOCOL = (7, 0, 0)  # RPC_PROTO_*_VERSION of the pinned llama.cpp (ggml-rpc.h; a test compares them)

CONNECT_TIMEOUT = 5.0
LOAD_SECONDS = 120.0  # a model load may take this long, plus the file's size at 10 MB/s
LOAD_BYTES_PER_SECOND = 10e6
EVALUATE_SECONDS = float(os.environ.get("ASSISTANT_RPC_TIMEOUT", "60"))  # silence allowed per evaluation,
EVALUATE_SECONDS_PER_TOKEN = 0.25  # plus this much per token it evaluates


class RemoteTargetLost(AssistantError):
    """The worker process that drives the remote model died or stopped answering."""


def probe(endpoint: str, timeout: float = CONNECT_TIMEOUT) -> tuple[int, int, int]:
    """The protocol version of the ggml-rpc-server at HOST:PORT; a clear AssistantError where none answers."""
    host, port = split_endpoint(endpoint)
    try:
        connection = socket.create_connection((host, port), timeout=timeout)
    except OSError as error:
        raise AssistantError(f"cannot reach the RPC server at {endpoint} ({error.strerror or error}): is "
                             "ggml-rpc-server running there?") from None
    try:
        with connection:
            connection.sendall(struct.pack("<BQ", HELLO, CAPABILITIES) + bytes(CAPABILITIES))
            reply = _receive(connection, 8 + 4 + CAPABILITIES)
    except socket.timeout:
        raise AssistantError(f"the RPC server at {endpoint} accepted the connection but did not answer within "
                             f"{timeout:g} s: it serves one client at a time, is another one using it?") from None
    except OSError as error:
        raise AssistantError(f"the RPC server at {endpoint} closed the connection during the handshake "
                             f"({error.strerror or error}): is it a ggml-rpc-server of a compatible build?") from None
    size, major, minor, patch = struct.unpack_from("<QBBB", reply)
    # ggml itself accepts any older minor and any patch, but the patch level counts changes to the list of
    # operations, and a graph whose operation numbers mean other things there would compute something else
    if size != 4 + CAPABILITIES or (major, minor, patch) != PROTOCOL:
        spoken = f"RPC protocol {major}.{minor}.{patch}" if size == 4 + CAPABILITIES else "an unknown protocol"
        raise AssistantError(f"the RPC server at {endpoint} speaks {spoken} and this build RPC protocol "
                             f"{'.'.join(map(str, PROTOCOL))}: run the same assistant version on both machines")
    return major, minor, patch


def _accepts(endpoint: str, timeout: float = 1.0) -> bool:
    """Whether HOST:PORT still accepts a TCP connection (a busy ggml-rpc-server does: its queue takes it)."""
    try:
        socket.create_connection(split_endpoint(endpoint), timeout=timeout).close()
        return True
    except OSError:
        return False


def _receive(connection: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


class RemoteContext:
    """Context's surface (evaluate, behind, tokens, timings) over a model on one ggml-rpc-server, or with its
    layers split over several (``HOST:PORT[=SHARE],...``, devices.split_endpoints)."""

    chooses = True  # verification asks for choose() or candidates(): token ids (and top logits) cross the network

    def __init__(self, model, endpoint: str, n_ctx: int = 4096, threads: int = 1, n_shared: int | None = None,
                 **options):
        """``model``: the target loaded here with its vocabulary only (tokenizer, template, metadata);
        ``n_shared``: the vocabulary the chain shares, over which ``choose`` takes its argmax there."""
        self.model = model
        self.endpoint = endpoint
        self.endpoints, _ = split_endpoints(endpoint)
        self.n_vocab = model.n_vocab
        self.tokens: list[int] = []
        self.decode_seconds = 0.0
        self.decode_calls = 0
        self.last_batch = 0
        self._settings = (n_ctx, threads, {**options, "choices_for": n_shared or model.n_vocab})
        self._process = self._to_worker = self._from_worker = None
        handle, self._logits_path = tempfile.mkstemp(prefix="assistant-logits-", dir=_shared_memory_dir())
        os.close(handle)
        # removed by close(), else when this object is collected or the interpreter exits (a chat that quits
        # without closing its pipeline); a worker whose parent vanished removes it itself
        self._remove_file = weakref.finalize(self, Path(self._logits_path).unlink, missing_ok=True)
        self._mapping = None
        self.n_ctx = n_ctx
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # --- the worker's lifetime --------------------------------------------------------------------
    def _start(self) -> None:
        for endpoint in self.endpoints:
            probe(endpoint)
        n_ctx, threads, options = self._settings
        handle, self._log_path = tempfile.mkstemp(prefix="assistant-rpc-", suffix=".log")
        # ggml writes its abort message to stderr: the log keeps it off the terminal (a chat UI owns that), for us
        with os.fdopen(handle, "wb") as log:
            self._process = subprocess.Popen(worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=log, env={**os.environ, "GGML_NO_BACKTRACE": "1"})
        self._to_worker = Connection(os.dup(self._process.stdin.fileno()), readable=False)
        self._from_worker = Connection(os.dup(self._process.stdout.fileno()), writable=False)
        self._process.stdin.close()
        self._process.stdout.close()
        self.tokens = []
        size = Path(self.model.path).stat().st_size
        try:
            self._to_worker.send((str(self.model.path), self.endpoint, n_ctx, threads, options, self._logits_path,
                                  self._log_path))
            reply = self._reply(LOAD_SECONDS + size / LOAD_BYTES_PER_SECOND, "loading the target there")
        except AssistantError:
            self._stop(kill=True)
            raise
        self.n_ctx, self.n_batch = reply[1], reply[2]

    def _reply(self, seconds: float, doing: str, after: str = ""):
        """The worker's next message, or RemoteTargetLost (the worker killed) when it dies or stays silent;
        ``after`` ends that error's message."""
        try:
            if self._from_worker.poll(seconds):
                reply = self._from_worker.recv()
                if reply[0] == "error":
                    self.tokens = []
                    raise AssistantError(reply[1])
                return reply
            reason = f"did not answer within {seconds:.0f} s while {doing}"
        except (EOFError, OSError):
            reason = f"dropped the connection while {doing}{self._worker_said()}"
        self._stop(kill=True)
        raise RemoteTargetLost(f"the target's RPC server at {self._culprits()} {reason}{after}")

    def _culprits(self) -> str:
        """The endpoint(s) to blame for a loss: of a split target, those that no longer accept a connection
        (a killed server refuses, a frozen link lets the attempt time out), else all of them."""
        if len(self.endpoints) == 1:
            return self.endpoint
        lost = [endpoint for endpoint in self.endpoints if not _accepts(endpoint)]
        named = ", ".join(lost or self.endpoints)
        return f"{named} (of {', '.join(self.endpoints)})"

    def _worker_said(self) -> str:
        """ggml's last words (its abort message), from the worker's log."""
        try:
            lines = [line.strip() for line in Path(self._log_path).read_text(errors="replace").splitlines()]
        except OSError:
            return ""
        said = [line.split(": ", 1)[-1] for line in lines if line and not line.startswith(("#", "["))]
        return f" ({said[-1]})" if said else ""

    def _stop(self, kill: bool = False) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if not kill:
            try:
                self._to_worker.send(("close",))
                process.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if process.poll() is None:
            process.kill()
        process.wait()
        self._to_worker.close()
        self._from_worker.close()
        Path(self._log_path).unlink(missing_ok=True)
        self.tokens = []

    # --- Context's surface ------------------------------------------------------------------------
    def evaluate(self, sequence, first_output: int) -> np.ndarray:
        """Hold ``sequence`` in the remote cache; logits of positions ``first_output``.. as a view that is valid
        until the next call."""
        rows = len(sequence) - first_output
        self._remote("evaluate", sequence, first_output, rows * self.n_vocab * 4)
        return self._view(np.float32, rows, self.n_vocab)

    def choose(self, sequence, first_output: int) -> np.ndarray:
        """As ``evaluate``, but only each row's argmax over the shared vocabulary, chosen on the server: one token
        id a row comes back over the network instead of n_vocab floats."""
        rows = len(sequence) - first_output
        self._remote("choose", sequence, first_output, rows * 4)
        return self._view(np.int32, rows)

    def candidates(self, sequence, first_output: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """As ``evaluate``, but only each row's ``count`` largest logits and their ids (Context.candidates), chosen
        on the server: 8 bytes a candidate come back instead of a row of n_vocab floats."""
        rows = len(sequence) - first_output
        self._remote("candidates", sequence, first_output, rows * count * 8, count)
        packed = self._view(np.int32, rows, 2 * count)
        return packed[:, :count], packed[:, count:].view(np.float32)

    def _remote(self, request: str, sequence, first_output: int, reply_bytes: int, count: int = 0) -> None:
        tokens = sequence.tokens
        end = check_evaluation(tokens, first_output, self.n_ctx)
        if self._process is None:
            self._start()
        keep = common_prefix(self.tokens, tokens)
        self._grow(reply_bytes)
        began = time.perf_counter()
        self._to_worker.send((request, keep, tokens[keep:], first_output, count))
        reply = self._reply(EVALUATE_SECONDS + EVALUATE_SECONDS_PER_TOKEN * (end - keep), "verifying",
                            "; the answer so far is kept, and the next answer reconnects")
        self.decode_seconds += time.perf_counter() - began
        self.decode_calls += 1
        self.last_batch = reply[1]
        del self.tokens[keep:]  # the worker's cache now holds the sequence: mirror it by its new tail only
        self.tokens += tokens[keep:]

    def _view(self, dtype, *shape) -> np.ndarray:
        return np.frombuffer(self._mapping, dtype=dtype, count=int(np.prod(shape))).reshape(shape)

    def _grow(self, size: int) -> None:
        """Make the shared file hold at least ``size`` bytes."""
        if self._mapping is None or len(self._mapping) < size:
            size = max(size, 2 * len(self._mapping or b""))
            with open(self._logits_path, "r+b") as file:
                file.truncate(size)
                # the old mapping is not closed: views of it handed out earlier may live on, and keep it open
                self._mapping = mmap.mmap(file.fileno(), size)

    def behind(self, sequence) -> int:
        return len(sequence) - common_prefix(self.tokens, sequence.tokens)

    def adopt_cache(self, source) -> bool:
        return False  # a cache would cross the network: the remote target evaluates its prompt itself

    def close(self) -> None:
        self._stop()
        self._mapping = None  # closed once no view of it is left
        self._remove_file()

    def __del__(self):  # a worker left running would hold the server's only client slot
        try:
            self.close()
        except Exception:
            pass


def _shared_memory_dir() -> str | None:
    """/dev/shm where there is one (the logits never touch a disk), else the temporary directory."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


WORKER_FLAG = "--remote-target-worker"  # a frozen app has no `python -m`: its own program, given this, runs work()


def worker_command() -> list[str]:
    """How to start the worker: this module run by this Python (a frozen app runs itself with WORKER_FLAG)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, WORKER_FLAG]
    return [sys.executable, "-m", __name__]


def work() -> None:
    """The worker: load the model on the RPC device, then evaluate what the parent asks until told to close.

    Messages arrive on stdin and leave on a private copy of stdout; fd 1 itself goes to the log (stderr), so
    nothing a library prints can corrupt them."""
    requests = Connection(os.dup(0), writable=False)
    replies = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)
    from assistant.engine.context import Context
    from assistant.engine.devices import rpc_device, split_endpoints
    from assistant.engine.model import Model
    from assistant.engine.sequence import TokenSequence

    path, endpoint, n_ctx, threads, options, logits_path, log_path = requests.recv()
    try:
        endpoints, shares = split_endpoints(endpoint)
        model = Model(path, device=[rpc_device(each) for each in endpoints], split=shares)
        context = Context(model, n_ctx=n_ctx, threads=threads, **options)
    except AssistantError as error:
        replies.send(("error", str(error)))
        return
    replies.send(("ready", context.n_ctx, context.n_batch))
    mapping, sequence = None, TokenSequence()  # one sequence, so the context compares only what changed
    while True:
        try:
            message = requests.recv()
        except EOFError:  # the parent is gone (killed, perhaps): nothing will remove the shared file but us
            Path(logits_path).unlink(missing_ok=True)
            break
        if message[0] == "close":
            break
        request, keep, new, first_output, count = message
        sequence.truncate(keep)
        sequence.extend(new)
        try:
            if request == "candidates":  # ids and the logits' bits side by side, one int32 array
                ids, logits = context.candidates(sequence, first_output, count)
                result = np.concatenate([ids, logits.view(np.int32)], axis=1)
            else:
                result = (context.choose if request == "choose" else context.evaluate)(sequence, first_output)
        except AssistantError as error:
            context.reset()
            sequence = TokenSequence()
            replies.send(("error", str(error)))
            continue
        if mapping is None or len(mapping) < result.nbytes:
            with open(logits_path, "r+b") as file:
                mapping = mmap.mmap(file.fileno(), os.fstat(file.fileno()).st_size)
        np.frombuffer(mapping, dtype=result.dtype, count=result.size)[:] = result.ravel()
        replies.send(("done", context.last_batch))
    context.close()
    model.close()
    Path(log_path).unlink(missing_ok=True)  # an orderly end (the parent may be gone): nothing to read in it


if __name__ == "__main__":
    work()
