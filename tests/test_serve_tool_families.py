"""A tool round trip through `assistant serve` and the `openai` client on a tiny random model of each family we
convert, with that family's own chat template (read from the pinned llama-cpp-python sdist): the forced call
comes back as OpenAI tool_calls in the family's format, streamed and whole, and the call and its result go
back into the family's template for the next answer."""

from __future__ import annotations

import json
import time

import jsonschema
import openai
import pytest

from converters import convert
from converters.random_checkpoint import make_checkpoint
from tests.fixtures.serve import in_process_server
from tests.fixtures.templates import family_template
from tests.test_tool_formats import PHI4_MINI_STYLE

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
FAMILIES = [  # (architecture, its template, the format expected)
    ("qwen2", "Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"),
    ("qwen3", "Qwen-Qwen3-0.6B.jinja", "hermes"),
    ("llama", "meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3"),
    ("mistral", "mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral"),
    ("mistral", "Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral"),
    ("granite", "ibm-granite-granite-3.3-2B-Instruct.jinja", "granite"),
    ("phi3", None, "phi4"),  # Phi-4-mini: its markers in a template of ours (none in the sdist)
    ("gemma3", "google-gemma-2-2b-it.jinja", "gemma3"),  # Gemma 3 writes its turns as Gemma 2 does
]


@pytest.fixture(scope="module", params=FAMILIES, ids=[f"{arch}-{name or 'phi4-mini'}" for arch, name, _ in FAMILIES])
def family_client(request, tmp_path_factory):
    from assistant.serve.generations import Generations
    from assistant.serve.prompts import prompt_tokens
    from assistant.serve.tool_formats import tool_format
    from assistant.speculative import Pipeline

    arch, name, expected = request.param
    template = PHI4_MINI_STYLE if name is None else family_template(name)
    assert tool_format(template).name == expected
    checkpoint = make_checkpoint(tmp_path_factory.mktemp(f"{arch}-checkpoint"), arch, hidden=64, layers=2,
                                 intermediate=128, heads=4, kv_heads=2, std=0.1, vocab=8192, bos_token_id=8189,
                                 eos_token_id=8191)
    config_path = checkpoint / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = template
    config_path.write_text(json.dumps(config))
    # not named after its family: llama.cpp looks up Phi-3's own tokens in a model whose name says "phi3"
    gguf = convert(checkpoint, outdir=tmp_path_factory.mktemp(f"{arch}-gguf"), name="tiny", types=("bf16",),
                   progress=False)["bf16"]
    generations = Generations(lambda: Pipeline.load([gguf], n_ctx=2048, threads=1), prompt_tokens, max_waiting=2)
    with in_process_server(generations) as server:
        deadline = time.monotonic() + 60
        while generations.state == "loading" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert generations.state == "ready", generations.error
        yield openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120), expected


def streamed_calls(stream) -> tuple[list[dict], str]:
    calls, reason = {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
        reason = chunk.choices[0].finish_reason or reason
    return [calls[index] for index in sorted(calls)], reason


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_forced_call_and_its_result_round_trip(family_client, stream):
    client, family = family_client
    ask = dict(model="demo", messages=QUESTION, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
               temperature=0, max_tokens=120)
    if stream:
        calls, reason = streamed_calls(client.chat.completions.create(stream=True, **ask))
    else:
        reply = client.chat.completions.create(**ask)
        reason = reply.choices[0].finish_reason
        calls = [{"id": call.id, "name": call.function.name, "arguments": call.function.arguments}
                 for call in reply.choices[0].message.tool_calls or []]
    assert reason == "tool_calls" and len(calls) == 1, calls
    (call,) = calls
    assert call["name"] == "get_weather"
    jsonschema.validate(json.loads(call["arguments"]), WEATHER["function"]["parameters"])
    assert len(call["id"]) == 9 if family == "mistral" else call["id"].startswith("call_")
    history = QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"}]
    answer = client.chat.completions.create(model="demo", messages=history, tools=[WEATHER], temperature=0,
                                            max_tokens=8)
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert answer.usage.prompt_tokens > client.chat.completions.create(
        model="demo", messages=QUESTION, tools=[WEATHER], temperature=0, max_tokens=1).usage.prompt_tokens
