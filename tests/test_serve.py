"""`assistant serve` through the real `openai` client and raw HTTP, against `assistant generate` on the same set."""

import http.client
import json
import os
import subprocess
import sys

import openai
import pytest

from tests.fixtures.serve import API_KEY

CODE = "def fibonacci(n):\n    if n < 2:"
QUESTION = "Write a function that checks whether a number is prime."


def generate(home, prompt, *args):
    """`assistant generate --json` in the server's data directory: the reference answer."""
    env = {**os.environ, "ASSISTANT_HOME": str(home), "ASSISTANT_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "assistant", "generate", prompt, "--json", "--ctx", "2048", *args],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def test_openai_client_answers_exactly_as_generate(server, server_home, client):
    reference = generate(server_home, QUESTION, "-n", "48")
    reply = client.chat.completions.create(model="demo", messages=[{"role": "user", "content": QUESTION}],
                                           max_tokens=48, temperature=0)
    assert reply.choices[0].message.content == reference["text"]
    assert reply.choices[0].finish_reason == ("length" if reference["stats"]["stop_reason"] == "max_tokens" else "stop")
    assert reply.usage.completion_tokens == len(reference["tokens"])
    assert reply.usage.prompt_tokens == reference["stats"]["prompt_tokens"]
    speculation = reply.model_extra["speculation"]
    assert speculation["chain"] == ["target", "mxfp4", "draft", "ngram"]
    assert speculation["tokens_per_second"] > 0 and len(speculation["levels"]) == 4
    assert sum(level["proposed"] for level in speculation["levels"][1:]) > 0


def test_openai_client_streams_the_same_answer_with_usage(server, server_home, client):
    reference = generate(server_home, CODE, "-n", "64", "--system", "You write Python.")
    stream = client.chat.completions.create(
        model="demo", stream=True, stream_options={"include_usage": True}, max_completion_tokens=64,
        messages=[{"role": "system", "content": "You write Python."}, {"role": "user", "content": CODE}])
    chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == reference["text"]
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [chunk for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].model_extra["speculation"]["chain"][0] == "target"
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == len(reference["tokens"])


def test_raw_sse_framing_byte_by_byte(server, server_home):
    reference = generate(server_home, CODE, "-n", "40")
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    body = json.dumps({"model": "demo", "messages": [{"role": "user", "content": CODE}], "max_tokens": 40,
                       "stream": True})
    connection.request("POST", "/v1/chat/completions", body,
                       {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
    response = connection.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type").startswith("text/event-stream")
    raw = response.read()
    connection.close()
    assert raw.endswith(b"\n\ndata: [DONE]\n\n")
    events = raw.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]  # every event ends with one blank line
    pieces, reasons = [], []
    for event in events[:-2]:
        assert event.startswith(b"data: {") and b"\n" not in event, event  # one data line, JSON on one line
        chunk = json.loads(event[len(b"data: "):])
        assert chunk["object"] == "chat.completion.chunk" and "usage" not in chunk
        delta = chunk["choices"][0]["delta"]
        pieces.append(delta.get("content", ""))
        reasons.append(chunk["choices"][0]["finish_reason"])
    assert "".join(pieces) == reference["text"]
    assert reasons[:-1] == [None] * (len(reasons) - 1) and reasons[-1] in ("stop", "length")


def test_completions_continue_raw_text_and_stop_at_stop_strings(server, server_home, client):
    reference = generate(server_home, CODE, "-n", "48", "--raw")
    reply = client.completions.create(model="demo", prompt=CODE, max_tokens=48, temperature=0)
    assert reply.choices[0].text == reference["text"]
    stream = client.completions.create(model="demo", prompt=CODE, max_tokens=48, temperature=0, stream=True)
    assert "".join(chunk.choices[0].text for chunk in stream) == reference["text"]
    stop = reference["text"].strip()[8:12]
    stopped = client.completions.create(model="demo", prompt=CODE, max_tokens=48, temperature=0, stop=[stop, "@@"])
    assert stopped.choices[0].text == reference["text"][:reference["text"].index(stop)]
    assert stopped.choices[0].finish_reason == "stop"


def test_fill_in_the_middle_needs_fim_tokens(server, client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="demo", prompt="def f(", suffix="\n    return x\n", max_tokens=8)
    assert refused.value.body["code"] == "fim_unsupported" and refused.value.body["param"] == "suffix"
    assert "fill-in-the-middle" in refused.value.body["message"]


def test_fill_in_the_middle_with_a_code_model_vocabulary(fim_home):
    """A model whose vocabulary has <|fim_prefix|>/<|fim_suffix|>/<|fim_middle|> answers the middle: the same
    tokens as generating after the prompt written out with those tokens."""
    from tests.fixtures.serve import ServerProcess

    process = ServerProcess(fim_home, api_key=None).wait_ready()
    try:
        prefix, suffix = "def area(radius):\n    ", "\n    return result\n"
        status, reply = process.post("/v1/completions", {"model": "fim", "prompt": prefix, "suffix": suffix,
                                                         "max_tokens": 12})
        assert status == 200, reply
        reference = generate(fim_home, f"<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>", "--raw",
                             "-n", "12")
        assert reply["choices"][0]["text"] == reference["text"]
        assert reply["usage"]["prompt_tokens"] == reference["stats"]["prompt_tokens"]
    finally:
        assert process.stop() == 0


@pytest.fixture(scope="module")
def fim_home(tmp_path_factory):
    """A tiny random Qwen2 model whose tokenizer has the three FIM tokens, registered as the set "fim"."""
    from converters import convert
    from converters.random_checkpoint import make_checkpoint
    from assistant import modelsets
    from assistant.demo import BENCH_PAIR

    tokenizer = tmp_path_factory.mktemp("fim-tokenizer")
    data = json.loads((BENCH_PAIR / "target" / "tokenizer.json").read_text())
    config = json.loads((BENCH_PAIR / "target" / "tokenizer_config.json").read_text())
    for offset, name in enumerate(["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"]):
        token = {"content": name, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                 "special": True}
        data["added_tokens"].append({"id": 8192 + offset, **token})
        config["added_tokens_decoder"][str(8192 + offset)] = token
    (tokenizer / "tokenizer.json").write_text(json.dumps(data))
    (tokenizer / "tokenizer_config.json").write_text(json.dumps(config))
    checkpoint = make_checkpoint(tmp_path_factory.mktemp("fim-checkpoint"), vocab=8200, tokenizer_dir=tokenizer,
                                 bos_token_id=8189, eos_token_id=8191, std=0.5)
    home = tmp_path_factory.mktemp("fim-home")
    written = convert(checkpoint, outdir=home / "gguf", name="fim", types=("bf16",), progress=False)
    modelsets.register("fim", [modelsets.Level("target", written["bf16"])], make_default=True,
                       models_dir=home / "models")
    return home


def error_of(reply: dict) -> dict:
    assert set(reply) == {"error"} and set(reply["error"]) == {"message", "type", "param", "code"}, reply
    assert reply["error"]["message"]
    return reply["error"]


CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello"}]
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
BAD_REQUESTS = [
    # (what, path, body, status, param)
    ("malformed JSON", CHAT, b'{"model": "demo", "messages": [', 400, None),
    ("not an object", CHAT, [1, 2], 400, None),
    ("no messages", CHAT, {"model": "demo"}, 400, "messages"),
    ("empty messages", CHAT, {"model": "demo", "messages": []}, 400, "messages"),
    ("messages not a list", CHAT, {"model": "demo", "messages": "hello"}, 400, "messages"),
    ("a message without content", CHAT, {"model": "demo", "messages": [{"role": "user"}]}, 400, "messages[0].content"),
    ("an unknown role", CHAT, {"model": "demo", "messages": [{"role": "wizard", "content": "x"}]}, 400,
     "messages[0].role"),
    ("an image part", CHAT, {"model": "demo", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:,"}}]}]}, 400, "messages[0].content"),
    ("temperature as text", CHAT, {"model": "demo", "messages": HELLO, "temperature": "hot"}, 400, "temperature"),
    ("max_tokens as text", CHAT, {"model": "demo", "messages": HELLO, "max_tokens": "10"}, 400, "max_tokens"),
    ("negative max_tokens", CHAT, {"model": "demo", "messages": HELLO, "max_tokens": -5}, 400, "max_tokens"),
    ("huge max_tokens", CHAT, {"model": "demo", "messages": HELLO, "max_tokens": 10**9}, 400, "max_tokens"),
    ("stop as a number", CHAT, {"model": "demo", "messages": HELLO, "stop": 5}, 400, "stop"),
    ("stream as text", CHAT, {"model": "demo", "messages": HELLO, "stream": "yes"}, 400, "stream"),
    ("n = 2", CHAT, {"model": "demo", "messages": HELLO, "n": 2}, 400, "n"),
    ("a tool without a function", CHAT, {"model": "demo", "messages": HELLO, "tools": [{"type": "function"}]}, 400,
     "tools[0].function"),
    ("a tool name with spaces", CHAT, {"model": "demo", "messages": HELLO, "tools": [
        {"type": "function", "function": {"name": "get weather"}}]}, 400, "tools[0].function.name"),
    ("tool parameters that are no schema", CHAT, {"model": "demo", "messages": HELLO, "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]}, 400,
     "tools[0].function.parameters"),
    ("tool_choice naming a missing tool", CHAT, {"model": "demo", "messages": HELLO, "tools": WEATHER,
                                                 "tool_choice": {"type": "function", "function": {"name": "g"}}},
     400, "tool_choice"),
    ("a tool message without a call", CHAT, {"model": "demo", "messages": HELLO + [
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]}, 400, "messages[1].tool_call_id"),
    ("a schema feature no grammar can honour", CHAT, {"model": "demo", "messages": HELLO, "response_format": {
        "type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer", "multipleOf": 3}}}}, 400,
     "response_format.json_schema.schema"),
    ("forced tool arguments no grammar can honour", CHAT, {"model": "demo", "messages": HELLO, "tool_choice": "required",
                                                           "tools": [{"type": "function", "function": {
                                                               "name": "f", "parameters": {"not": {}}}}]}, 400,
     "tools[0].function.parameters"),
    ("an unknown response_format", CHAT, {"model": "demo", "messages": HELLO, "response_format": {"type": "xml"}},
     400, "response_format.type"),
    ("no model", CHAT, {"messages": HELLO}, 400, "model"),
    ("an unknown model", CHAT, {"model": "gpt-4o", "messages": HELLO}, 404, "model"),
    ("a prompt longer than the context", CHAT, {"model": "demo", "messages": [
        {"role": "user", "content": "def f(x): return x\n" * 600}]}, 400, "messages"),
    ("prompt and answer over the context", "/v1/completions", {"model": "demo", "prompt": "x = 1\n" * 300,
                                                               "max_tokens": 1900}, 400, "prompt"),
    ("a batch of prompts", "/v1/completions", {"model": "demo", "prompt": ["a", "b"]}, 400, "prompt"),
    ("token ids outside the vocabulary", "/v1/completions", {"model": "demo", "prompt": [1, 2, 10**7]}, 400,
     "prompt"),
    ("an empty prompt", "/v1/completions", {"model": "demo", "prompt": ""}, 400, "prompt"),
]


@pytest.mark.parametrize("what,path,body,status,param", BAD_REQUESTS, ids=[case[0] for case in BAD_REQUESTS])
def test_bad_requests_get_a_clear_error_object(server, what, path, body, status, param):
    got, reply = server.post(path, body)
    assert got == status, reply
    error = error_of(reply)
    assert error["param"] == param and error["type"] == "invalid_request_error"
    if "context" in what:
        assert error["code"] == "context_length_exceeded" and "2048" in error["message"]
    assert server.get("/health")[0] == 200


def test_keys_body_size_and_unknown_paths(server):
    assert server.get("/health", key=None)[0] == 200  # no key needed to ask whether it is up
    for key in (None, "wrong-key", API_KEY + "x"):
        status, reply = server.get("/v1/models", key=key)
        assert status == 401 and error_of(reply)["code"] == "invalid_api_key"
    status, reply = server.post(CHAT, {"model": "demo", "messages": HELLO}, key="wrong")
    assert status == 401
    oversized = json.dumps({"model": "demo", "messages": [{"role": "user", "content": "x" * (2 << 20)}]}).encode()
    status, reply = server.post(CHAT, oversized)
    assert status == 413 and "1048576 bytes" in error_of(reply)["message"]
    status, reply = server.get("/v1/nothing")
    assert status == 404 and error_of(reply)["code"] == "http_404"
    status, reply = server.get(CHAT)
    assert status == 405 and error_of(reply)
    status, models = server.get("/v1/models")
    assert status == 200 and [model["id"] for model in models["data"]] == ["demo"]
    status, health = server.get("/health")
    assert status == 200 and health["status"] == "ok" and not health["generating"] and health["waiting"] == 0
