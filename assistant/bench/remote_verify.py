"""`assistant bench --remote-verify GGUF`: what verifying 8 tokens costs a remote target against verifying 1,
read from the server's own clock.

Our build's ggml-rpc-server prints, when ASSISTANT_RPC_TIMINGS is set, one line per graph it computes (its wall
time and node count; the patch in native/patches). A verification is one llama_decode here and one or more graphs
there: the sum of the lines it caused is its cost on the server, without the round trips, the serialisation and
this side's work, which the client's clock (reported beside it) includes. The server runs our kernels (its
default) and then llama.cpp's stock ones, so the two ratios come from the same run.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time

from assistant.cpu import STOCK_KERNELS

TIMING_LINE = re.compile(r"^assistant-rpc-timing: graph_(?:re)?compute ([0-9.]+) ms (\d+) nodes$", re.MULTILINE)
TIMINGS_VARIABLE = "ASSISTANT_RPC_TIMINGS"
KERNELS = {"ours": {}, "stock": dict(STOCK_KERNELS)}
SIZES = (1, 8)  # tokens verified: with the last accepted one, 2 and 9 rows
PROMPT_TOKENS = 300


def timing_lines(text: str) -> list[tuple[float, int]]:
    """(milliseconds, nodes) of each graph the server reported computing."""
    return [(float(ms), int(nodes)) for ms, nodes in TIMING_LINE.findall(text)]


class TimedServer:
    """A ggml-rpc-server on loopback that reports its graphs' timings into a file this side reads."""

    def __init__(self, threads: int, environment: dict | None = None):
        from assistant.bench.remote import wait_listening
        from assistant.engine.rpc_program import rpc_server_command

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        command, env = rpc_server_command("127.0.0.1", port, threads)
        self.endpoint = f"127.0.0.1:{port}"
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(command, env={**env, **(environment or {}), TIMINGS_VARIABLE: "1"},
                                        stdout=subprocess.DEVNULL, stderr=self._log)
        try:
            wait_listening(self.process, ("127.0.0.1", port))
        except BaseException:
            self.close()
            raise

    def mark(self) -> int:
        """Where the report stands now: ``since(mark)`` reads what the server said after it."""
        return os.fstat(self._log.fileno()).st_size

    def since(self, mark: int) -> list[tuple[float, int]]:
        return timing_lines(os.pread(self._log.fileno(), self.mark() - mark, mark).decode(errors="replace"))

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def verification_costs(path, threads: int, environment: dict, repeats: int, sizes=SIZES) -> dict:
    """Per size: the best of ``repeats`` verifications of that many tokens after a fixed prompt, by the server's
    clock (the sum of its graphs) and by this side's, and the graphs the server computed for one."""
    from assistant.engine import Model
    from assistant.engine.remote import RemoteContext
    from assistant.engine.sequence import TokenSequence
    from assistant.speculative.pipeline import target_context_options

    prompt = list(range(100, 100 + PROMPT_TOKENS))  # token ids: the cost does not depend on the text
    draft = list(range(600, 600 + max(sizes)))
    best = {size: {"server_ms": float("inf"), "client_ms": float("inf")} for size in sizes}
    with Model(path, vocab_only=True) as vocabulary, TimedServer(threads, environment) as server:
        context = RemoteContext(vocabulary, server.endpoint, n_ctx=1024, threads=1, **target_context_options())
        try:
            for _ in range(repeats):
                for size in sizes:
                    context.choose(TokenSequence(prompt), len(prompt) - 1)
                    mark = server.mark()
                    began = time.perf_counter()
                    context.choose(TokenSequence(prompt + draft[:size]), len(prompt) - 1)
                    client_ms = (time.perf_counter() - began) * 1e3
                    graphs = server.since(mark)
                    row = best[size]
                    row["client_ms"] = min(row["client_ms"], client_ms)
                    row["server_ms"] = min(row["server_ms"], sum(ms for ms, _ in graphs))
                    row["graphs"], row["nodes"] = len(graphs), sum(nodes for _, nodes in graphs)
        finally:
            context.close()
    return best


def measure(path, threads: int, repeats: int = 3, kernels=tuple(KERNELS), say=print) -> dict:
    """Each kind of kernels on the server: the costs of verifying 1 and 8 tokens and their ratio by each clock."""
    rows = {}
    for name in kernels:
        costs = verification_costs(path, threads, KERNELS[name], repeats)
        one, eight = costs[SIZES[0]], costs[SIZES[-1]]
        rows[name] = {"costs": costs, "server_ratio": eight["server_ms"] / one["server_ms"],
                      "client_ratio": eight["client_ms"] / one["client_ms"]}
        say(f"  {name} kernels on the server: verify {SIZES[0]} token {one['server_ms']:.1f} ms, {SIZES[-1]} tokens "
            f"{eight['server_ms']:.1f} ms: {rows[name]['server_ratio']:.2f}x by the server's clock "
            f"({rows[name]['client_ratio']:.2f}x by the client's)")
    return {"target": str(path), "server_threads": threads, "repeats": repeats, "prompt_tokens": PROMPT_TOKENS,
            "kernels": rows}


def report(result: dict) -> str:
    lines = [f"Remote target's verification cost ({result['target']}, ggml-rpc-server -t {result['server_threads']} "
             f"on loopback, after a {result['prompt_tokens']}-token prompt, best of {result['repeats']}):", "",
             "| kernels on the server | 1 token, server ms | 8 tokens, server ms | 8 / 1 (server) | 1 token, client ms "
             "| 8 tokens, client ms | 8 / 1 (client) | graphs per verification |", "|---|---|---|---|---|---|---|---|"]
    for name, row in result["kernels"].items():
        one, eight = row["costs"][SIZES[0]], row["costs"][SIZES[-1]]
        lines.append(f"| {name} | {one['server_ms']:.1f} | {eight['server_ms']:.1f} | {row['server_ratio']:.2f}x | "
                     f"{one['client_ms']:.1f} | {eight['client_ms']:.1f} | {row['client_ratio']:.2f}x | "
                     f"{eight['graphs']} |")
    return "\n".join(lines)
