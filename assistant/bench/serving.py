"""What the server costs: the same prompts answered in process (as `assistant generate` does) and streamed
through `assistant serve` over loopback, alternating prompt by prompt, greedy, on one model set.

Both are timed from the request to the last token, prompt included; the server's figure also holds the HTTP
exchange, JSON and Server-Sent Events framing, and the hand-over between its generation thread and its event
loop. The answers must be identical."""

from __future__ import annotations

import http.client
import json
import math
import os
import subprocess
import sys
import time

from assistant.errors import AssistantError


def measure(model_set, prompts: list[dict], max_tokens: int, threads: int, say=print) -> dict:
    from assistant.speculative import Pipeline, Sampling, Stats

    server, port = _start_server(model_set.name, threads)
    try:
        with Pipeline.load(model_set, threads=threads) as pipeline:
            _wait_ready(server, port)

            def direct(messages):
                began, pieces = time.perf_counter(), []
                for event in pipeline.chat(messages, Sampling(), max_tokens):
                    if isinstance(event, Stats):
                        return time.perf_counter() - began, "".join(pieces), event.new_tokens
                    pieces.append(event.text)

            def served(messages):
                return _stream(port, model_set.name, messages, max_tokens)

            direct(prompts[0]["messages"]), served(prompts[0]["messages"])  # warm both
            rows = []
            for index, prompt in enumerate(prompts):
                order = (direct, served) if index % 2 == 0 else (served, direct)
                results = {method.__name__: method(prompt["messages"]) for method in order}
                (direct_s, direct_text, tokens), (served_s, served_text, served_tokens) = \
                    results["direct"], results["served"]
                if (served_text, served_tokens) != (direct_text, tokens):
                    raise AssistantError(f"prompt {prompt['id']}: the server's answer differs from the direct one")
                rows.append({"id": prompt["id"], "tokens": tokens, "direct_tps": tokens / direct_s,
                             "served_tps": tokens / served_s})
                say(f"  {prompt['id']}: {tokens} tokens, direct {tokens / direct_s:.1f} tokens/s, "
                    f"served {tokens / served_s:.1f} tokens/s")
    finally:
        server.terminate()
        server.wait(30)
    ratio = math.exp(sum(math.log(row["served_tps"] / row["direct_tps"]) for row in rows) / len(rows))
    return {"model_set": model_set.name, "max_tokens": max_tokens, "threads": threads, "rows": rows,
            "served_over_direct": ratio}


def _start_server(name: str, threads: int) -> tuple[subprocess.Popen, int]:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "assistant", "serve", "--model-set", name, "--port", str(port),
                                "--threads", str(threads)], env={**os.environ, "ASSISTANT_API_KEY": ""},
                               stderr=subprocess.DEVNULL)
    return process, port


def _wait_ready(server, port: int, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssistantError(f"`assistant serve` exited with status {server.returncode}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssistantError("`assistant serve` did not become ready")


def _stream(port: int, model: str, messages: list[dict], max_tokens: int) -> tuple[float, str, int]:
    """Seconds, text and completion tokens of one streamed chat completion, read as a client would."""
    began = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise AssistantError(f"the server answered {response.status}: {response.read()[:200]!r}")
    pieces, tokens = [], None
    for line in response.fp:
        if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
            if line.strip() == b"data: [DONE]":
                break
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        for choice in chunk["choices"]:
            pieces.append(choice["delta"].get("content", ""))
    seconds = time.perf_counter() - began
    connection.close()
    return seconds, "".join(pieces), tokens
