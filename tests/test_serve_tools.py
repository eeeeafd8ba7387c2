"""Tools and structured output through `assistant serve` on the real demo model (SmolLM2-135M-Instruct, whose
template has no tools: the tools go into its system message), with the `openai` client and with a real agent
client from PyPI, the OpenAI Agents SDK."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import openai
import pytest

from assistant import modelsets
from tests.fixtures.serve import API_KEY, ServerProcess

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The local time in a city.",
                                         "parameters": {"type": "object", "properties": {
                                             "city": {"type": "string", "maxLength": 40}}, "required": ["city"]}}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory, imported_smollm2):
    home = tmp_path_factory.mktemp("tools-home")
    modelsets.register("demo", [modelsets.Level("target", imported_smollm2["bf16"]),
                                modelsets.Level("mxfp4", imported_smollm2["mxfp4"])],
                       make_default=True, models_dir=home / "models")
    process = ServerProcess(home, "--ctx", "2048").wait_ready()
    yield process
    assert process.stop() == 0


@pytest.fixture(scope="module")
def client(demo_server):
    return openai.OpenAI(base_url=demo_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def called(message) -> list[tuple[str, dict]]:
    return [(call.function.name, json.loads(call.function.arguments)) for call in message.tool_calls or []]


def streamed(stream) -> tuple[str, list[dict], str]:
    """(content, tool calls, finish reason) of a streamed answer, joined as OpenAI's clients join deltas."""
    content, calls, reason = "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
        reason = choice.finish_reason or reason
    return content, [calls[index] for index in sorted(calls)], reason


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_round_trip(client, stream):
    """The model must call (tool_choice required), the client sends the result back, the model answers."""
    ask = dict(model="demo", messages=QUESTION, tools=[WEATHER, TIME], tool_choice="required", temperature=0,
               max_tokens=96)
    if stream:
        content, calls, reason = streamed(client.chat.completions.create(stream=True, **ask))
        call_id, name, arguments = calls[0]["id"], calls[0]["name"], json.loads(calls[0]["arguments"])
    else:
        reply = client.chat.completions.create(**ask)
        message, reason = reply.choices[0].message, reply.choices[0].finish_reason
        (name, arguments), call_id = called(message)[0], message.tool_calls[0].id
    assert reason == "tool_calls" and name in ("get_weather", "get_time") and call_id
    jsonschema.validate(arguments, (WEATHER if name == "get_weather" else TIME)["function"]["parameters"])
    history = QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]},
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps({"city": "Paris", "sky": "sunny", "c": 21})}]
    answer = client.chat.completions.create(model="demo", messages=history, tools=[WEATHER, TIME], temperature=0,
                                            max_tokens=64, stream=stream)
    content, _, reason = streamed(answer) if stream else (answer.choices[0].message.content, None,
                                                           answer.choices[0].finish_reason)
    assert reason in ("stop", "length", "tool_calls") and (content or reason == "tool_calls")


def test_a_named_tool_choice_calls_that_tool(client):
    reply = client.chat.completions.create(model="demo", messages=QUESTION, tools=[WEATHER, TIME], temperature=0,
                                           tool_choice={"type": "function", "function": {"name": "get_time"}},
                                           max_tokens=64)
    assert [name for name, _ in called(reply.choices[0].message)] == ["get_time"]


def test_response_format_json_schema_whole_and_streamed(client):
    schema = {"type": "object", "properties": {"language": {"enum": ["python", "rust", "go"]},
                                               "reason": {"type": "string", "maxLength": 80}},
              "required": ["language", "reason"], "additionalProperties": False}
    ask = dict(model="demo", temperature=0, max_tokens=96,
               messages=[{"role": "user", "content": "Which language should I learn first? Answer in JSON."}],
               response_format={"type": "json_schema", "json_schema": {"name": "choice", "schema": schema,
                                                                        "strict": True}})
    whole = client.chat.completions.create(**ask).choices[0].message.content
    jsonschema.validate(json.loads(whole), schema)
    assert streamed(client.chat.completions.create(stream=True, **ask))[0] == whole
    anything = client.chat.completions.create(**{**ask, "response_format": {"type": "json_object"}})
    assert isinstance(json.loads(anything.choices[0].message.content), dict)


def test_the_openai_agents_sdk_runs_a_tool_through_serve(demo_server):
    """A real agent loop (openai-agents from PyPI): it sends the tools, runs the one the model calls, sends the
    result and takes the model's next answer as the final output."""
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    runs = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather now in a city."""
        runs.append(city)
        return f"It is sunny and 21 C in {city}."

    async def run():
        model = OpenAIChatCompletionsModel(model="demo", openai_client=openai.AsyncOpenAI(
            base_url=demo_server.url + "/v1", api_key=API_KEY, max_retries=0))
        agent = Agent(name="weather", instructions="You answer questions about the weather.", tools=[get_weather],
                      model=model, model_settings=ModelSettings(tool_choice="required", temperature=0,
                                                                max_tokens=64))
        return await Runner.run(agent, "What is the weather in Paris?", max_turns=4)

    result = asyncio.run(run())
    assert runs and isinstance(runs[0], str)
    assert isinstance(result.final_output, str) and result.final_output.strip()
