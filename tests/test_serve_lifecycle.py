"""`assistant serve` under load and through its life: concurrent clients, clients that leave, loading, failing."""

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from assistant import modelsets
from tests.fixtures.serve import API_KEY, ServerProcess, free_port, in_process_server

PROMPTS = ["def fibonacci(n):\n    if n < 2:", "class Stack:\n    def __init__(self):", "import os\n\ndef walk(path):",
           "def parse(line):\n    parts ="]
HEADERS = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}


def open_stream(server, prompt: str, max_tokens: int, path="/v1/completions", timeout=120.0):
    """Start a streaming completion and return the connection and response, headers read."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    body = {"model": "demo", "prompt": prompt, "max_tokens": max_tokens, "stream": True}
    connection.request("POST", path, json.dumps(body), HEADERS)
    return connection, connection.getresponse()


def read_events(response, count: int) -> list[bytes]:
    events = []
    while len(events) < count:
        line = response.fp.readline()
        assert line, "the stream ended early"
        if line.startswith(b"data: "):
            events.append(line.strip())
    return events


def until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def health(server) -> dict:
    return server.get("/health")[1]


def test_a_client_that_leaves_mid_stream_stops_its_generation(server):
    before = health(server)["cancelled"]
    connection, response = open_stream(server, PROMPTS[0], 1900)
    read_events(response, 3)
    assert health(server)["generating"]
    connection.close()  # the editor closed the tab
    until(lambda: not health(server)["generating"], 2.0, "the generation stops")
    assert health(server)["cancelled"] == before + 1


def test_a_client_that_gives_up_waiting_is_dropped_from_the_queue_or_stopped(server):
    before = health(server)["cancelled"]
    connection, response = open_stream(server, PROMPTS[1], 1900)  # keeps the generation thread busy
    read_events(response, 2)
    waiting = http.client.HTTPConnection("127.0.0.1", server.port, timeout=0.5)
    waiting.request("POST", "/v1/completions", json.dumps({"model": "demo", "prompt": "x = 1", "max_tokens": 5}),
                    HEADERS)
    until(lambda: health(server)["waiting"] == 1, 2.0, "the second request waits")
    with pytest.raises(TimeoutError):
        waiting.getresponse()  # the client's own timeout: it hangs up while queued
    waiting.close()
    until(lambda: health(server)["waiting"] == 0, 2.0, "the queued request is dropped")
    assert health(server)["generating"]  # the first one goes on
    connection.close()
    until(lambda: not health(server)["generating"], 2.0, "the generation stops")
    assert health(server)["cancelled"] == before + 2
    # and a non-streaming client that hangs up while its answer is being generated
    quitter = http.client.HTTPConnection("127.0.0.1", server.port, timeout=0.5)
    quitter.request("POST", "/v1/completions", json.dumps({"model": "demo", "prompt": PROMPTS[2],
                                                           "max_tokens": 1900}), HEADERS)
    until(lambda: health(server)["generating"], 2.0, "it generates")
    quitter.close()
    until(lambda: not health(server)["generating"], 2.0, "the generation stops")
    assert health(server)["cancelled"] == before + 3


def test_load_of_concurrent_clients_loses_nothing_and_leaks_nothing(server):
    """8 clients, 50 requests: plain, streamed, and streamed then abandoned. Each is answered exactly as alone
    or refused with 503 + Retry-After (the queue holds 4; a refused client tries again shortly, up to 100
    times); memory does not grow."""
    def ask(prompt):
        status, reply = server.post("/v1/completions", {"model": "demo", "prompt": prompt, "max_tokens": 24})
        assert status == 200, reply
        return reply["choices"][0]["text"]

    references = {prompt: ask(prompt) for prompt in PROMPTS}
    for prompt in PROMPTS:  # warm: the allocator has seen every size
        ask(prompt)
    rss_before = server.rss_kib()
    outcomes, refusals, failures, lock = [], [], [], threading.Lock()
    counter = iter(range(50))

    def client():
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            prompt = PROMPTS[index % len(PROMPTS)]
            try:
                for _ in range(100):
                    outcome = one_request(server, index, prompt, references[prompt])
                    if outcome != "refused":
                        break
                    refusals.append(index)
                    time.sleep(0.1)
                outcomes.append(outcome)
            except Exception as error:  # noqa: BLE001 - reported below with its request
                failures.append(f"request {index}: {error!r}")

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not failures, failures
    assert len(outcomes) == 50
    assert outcomes.count("answered") + outcomes.count("abandoned") + outcomes.count("refused") == 50
    assert outcomes.count("answered") > 25 and "abandoned" in outcomes and refusals, (outcomes, len(refusals))
    until(lambda: not health(server)["generating"] and health(server)["waiting"] == 0, 10.0, "the server is idle")
    for prompt in PROMPTS:
        assert ask(prompt) == references[prompt]  # the contexts still answer as before
    growth = server.rss_kib() - rss_before
    assert growth < 32 * 1024, f"RSS grew by {growth} KiB over 50 requests"


def one_request(server, index: int, prompt: str, reference: str) -> str:
    kind = ("plain", "stream", "abandon")[index % 3]
    if kind == "plain":
        status, headers, reply = server.request("POST", "/v1/completions",
                                                {"model": "demo", "prompt": prompt, "max_tokens": 24})
        if status == 503:
            return refused(headers, reply)
        assert status == 200 and reply["choices"][0]["text"] == reference, reply
        return "answered"
    connection, response = open_stream(server, prompt, 24)
    try:
        if response.status == 503:
            return refused(response.headers, json.loads(response.read()))
        assert response.status == 200
        if kind == "abandon":
            read_events(response, 2)
            return "abandoned"
        events = response.read().split(b"\n\n")
        assert events[-2:] == [b"data: [DONE]", b""]
        text = "".join(json.loads(event[6:])["choices"][0]["text"] for event in events[:-2])
        assert text == reference
        return "answered"
    finally:
        connection.close()


def refused(headers, reply) -> str:
    assert headers["Retry-After"] and reply["error"]["code"] == "queue_full", reply
    return "refused"


def test_health_says_loading_until_the_models_are_ready(demo_set):
    """In process, with the load held back: /health and generation requests answer 503 while loading."""
    from assistant.serve.generations import Generations
    from assistant.serve.prompts import prompt_tokens
    from assistant.speculative import Pipeline

    release = threading.Event()

    def load():
        release.wait(60)
        return Pipeline.load(demo_set, n_ctx=256)

    generations = Generations(load, prompt_tokens, max_waiting=2)
    try:
        with in_process_server(generations) as client:
            until(lambda: _answers(client), 10.0, "the server listens")
            status, headers, body = client.request("GET", "/health")
            assert status == 503 and body["status"] == "loading" and headers["Retry-After"]
            status, reply = client.post("/v1/chat/completions", {"model": "demo", "messages": [
                {"role": "user", "content": "hi"}]})
            assert status == 503 and reply["error"]["code"] == "model_loading"
            release.set()
            until(lambda: client.get("/health")[0] == 200, 60.0, "the models are loaded")
            status, reply = client.post("/v1/completions", {"model": "demo", "prompt": "x = ", "max_tokens": 4})
            assert status == 200 and reply["usage"]["completion_tokens"] <= 4
    finally:
        release.set()
    assert generations.pipeline.levels == []  # closed by the generation thread


def _answers(client) -> bool:
    try:
        client.get("/health")
        return True
    except OSError:
        return False


def serve(home, *args, timeout=120):
    env = {**os.environ, "ASSISTANT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "assistant", "serve", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_a_model_set_that_cannot_load_ends_the_server_with_one_line(assistant_home, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(64))
    modelsets.register("broken", [modelsets.Level("target", broken)], make_default=True)
    done = serve(assistant_home, "--port", str(free_port()))
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "broken.gguf" in errors[0] and "Traceback" not in done.stderr


def test_a_taken_port_is_refused_before_loading(assistant_home, demo_set):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = serve(assistant_home, "--port", str(taken.getsockname()[1]), timeout=30)
    assert done.returncode == 1 and "pick another with --port" in done.stderr
    assert "loading" not in done.stderr


def test_ctrl_c_cuts_a_running_answer_short_with_an_error_event_and_exits_cleanly(server_home):
    process = ServerProcess(server_home).wait_ready()
    connection, response = open_stream(process, PROMPTS[0], 1900)
    read_events(response, 2)
    rest = []
    reader = threading.Thread(target=lambda: rest.append(response.fp.read()))  # the client goes on reading
    reader.start()
    began = time.monotonic()
    assert process.stop() == 0 and time.monotonic() - began < 10
    reader.join(10)
    connection.close()
    raw = rest[0]  # still in HTTP's chunked framing: read_events read lines past http.client
    assert raw.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), raw[-200:]
    error = raw[raw.rindex(b'data: {"error"'):raw.rindex(b"data: [DONE]")]
    assert json.loads(error[6:])["error"]["code"] == "shutdown"
