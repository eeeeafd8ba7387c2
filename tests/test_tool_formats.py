"""Tool-call formats (serve/tool_formats.py) against the families' own chat templates, read from the pinned
llama-cpp-python sdist: each family is recognised, each template renders tools and a tool-call history, each
format's calls are read back, streaming holds back what may be a call, and each forced grammar is one llama.cpp
accepts and that accepts the family's own call text (run by llama.cpp over a vocabulary-only GGUF)."""

from __future__ import annotations

import copy
import json
import re

import pytest

from assistant.engine.chat_template import _compile
from assistant.serve.schema_grammar import UnsupportedSchema
from assistant.serve.tool_formats import (Gemma3Format, GraniteFormat, HermesFormat, Llama3Format, MistralFormat,
                                          Phi4Format, ToolFormat, template_supports_tools, tool_format)
from tests.fixtures.templates import family_template, vocabulary_gguf  # noqa: F401 (a fixture)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}

# Phi-4-mini's template is not in the sdist: this is our own short template with its markers only (the tools
# ride on the system message's "tools" key, between <|tool|> and <|/tool|>), not Microsoft's text.
PHI4_MINI_STYLE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% if m.tools %}<|tool|>{{ m.tools }}"
                   "<|/tool|>{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")

FAMILIES = {  # template file -> the family recognised
    "Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
    "Qwen-Qwen3-0.6B.jinja": "hermes",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "hermes",
    "ibm-granite-granite-4.0.jinja": "hermes",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3",
    "meta-llama-Llama-3.3-70B-Instruct.jinja": "llama3",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral",
    "unsloth-mistral-Devstral-Small-2507.jinja": "mistral",
    "ibm-granite-granite-3.3-2B-Instruct.jinja": "granite",
    "microsoft-Phi-3.5-mini-instruct.jinja": "generic",
    "google-gemma-2-2b-it.jinja": "gemma3",  # Gemma 3 writes its turns as Gemma 2 does
}
WITHOUT_TOOLS = {"microsoft-Phi-3.5-mini-instruct.jinja", "google-gemma-2-2b-it.jinja"}
# a history call's arguments given as JSON text come out as a quoted string in these: they want an object
WANT_OBJECT_ARGUMENTS = {"Qwen-Qwen2.5-7B-Instruct.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
                         "meta-llama-Llama-3.2-3B-Instruct.jinja", "meta-llama-Llama-3.3-70B-Instruct.jinja",
                         "mistralai-Mistral-Nemo-Instruct-2407.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja"}
DROPS_CALLS = {"ibm-granite-granite-3.3-2B-Instruct.jinja"}  # renders only an assistant message's content
# an assistant message with tool calls and content None (OpenAI's usual) breaks these: send "" instead
FAIL_ON_NONE_CONTENT = {"Qwen-Qwen3-0.6B.jinja", "unsloth-mistral-Devstral-Small-2507.jinja",
                        "ibm-granite-granite-3.3-2B-Instruct.jinja"}

CALL_ID = "a1B2c3D4e"  # 9 letters and digits: Mistral's templates refuse any other id
HISTORY = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": CALL_ID, "name": "get_weather", "content": "22 degrees and sunny"},
]

FORMATS = [ToolFormat(), HermesFormat(), Llama3Format(), MistralFormat(named=False), MistralFormat(named=True),
           GraniteFormat(), Phi4Format(), Gemma3Format()]
FORMAT_IDS = ["generic", "hermes", "llama3", "mistral-list", "mistral-named", "granite", "phi4", "gemma3"]


def call(name: str, **arguments) -> dict:
    return {"id": "x", "type": "function", "function": {"name": name, "arguments": arguments}}


def read(calls: list[dict]) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


# --- recognising the family ------------------------------------------------------------------------
@pytest.mark.parametrize("filename", FAMILIES)
def test_the_family_is_recognised_from_its_template(filename):
    template = family_template(filename)
    assert tool_format(template).name == FAMILIES[filename]
    assert template_supports_tools(template) == (filename not in WITHOUT_TOOLS)


def test_mistral_templates_pick_the_call_form_they_write():
    assert not tool_format(family_template("mistralai-Mistral-Nemo-Instruct-2407.jinja")).named
    assert tool_format(family_template("Mistral-Small-3.2-24B-Instruct-2506.jinja")).named
    assert tool_format(family_template("unsloth-mistral-Devstral-Small-2507.jinja")).named


def test_phi4_mini_markers_and_no_template_at_all():
    assert tool_format(PHI4_MINI_STYLE).name == "phi4"
    assert not template_supports_tools(PHI4_MINI_STYLE)  # a message's "tools" key is not the variable
    assert tool_format(None).name == tool_format("{{ messages }}").name == "generic"


# --- rendering -------------------------------------------------------------------------------------
def render(template: str, messages: list[dict], tools: list[dict] | None) -> str:
    """As engine/chat_template.py renders for a model (its own jinja2 environment: raise_exception,
    strftime_now, Hugging Face's tojson)."""
    return _compile(template).render(messages=messages, tools=tools, add_generation_prompt=True,
                                     bos_token="<s>", eos_token="</s>")


def prompt_for(template: str, messages: list[dict], tools: list[dict]) -> str:
    if template_supports_tools(template):
        return render(template, messages, tools)
    return render(template, tool_format(template).plain_conversation(messages, tools), None)


@pytest.mark.parametrize("filename", [*FAMILIES, "phi4-mini-style"])
def test_each_template_renders_tools_and_a_tool_history(filename):
    template = PHI4_MINI_STYLE if filename == "phi4-mini-style" else family_template(filename)
    prompt = prompt_for(template, HISTORY, [WEATHER])
    assert "get_weather" in prompt and "The weather now in a city." in prompt
    assert "22 degrees and sunny" in prompt
    shown = '"city": "Paris"' in prompt or "city='Paris'" in prompt
    assert shown == (filename not in DROPS_CALLS), prompt


@pytest.mark.parametrize("filename", sorted(set(FAMILIES) - WITHOUT_TOOLS - DROPS_CALLS))
def test_which_templates_want_the_arguments_as_an_object(filename):
    history = copy.deepcopy(HISTORY)
    history[2]["tool_calls"][0]["function"]["arguments"] = '{"city": "Paris"}'
    prompt = render(family_template(filename), history, [WEATHER])
    assert ('\\"city\\"' in prompt) == (filename in WANT_OBJECT_ARGUMENTS), prompt


@pytest.mark.parametrize("filename", sorted(FAIL_ON_NONE_CONTENT))
def test_some_templates_break_on_a_call_without_content(filename):
    history = copy.deepcopy(HISTORY)
    history[2]["content"] = None
    with pytest.raises(Exception):
        render(family_template(filename), history, [WEATHER])


def test_gemma_gets_no_system_turn_and_alternating_roles():
    """Gemma 2's template refuses a system message and roles out of turn; the folded history has neither."""
    history = [*HISTORY, {"role": "tool", "tool_call_id": CALL_ID, "content": "wind 3 km/h"},
               {"role": "user", "content": "And tomorrow?"}]
    folded = Gemma3Format().plain_conversation(history, [WEATHER])
    assert [m["role"] for m in folded] == ["user", "assistant", "user"]
    assert folded[0]["content"].startswith("You are terse.") and "```tool_code" in folded[0]["content"]
    assert folded[1]["content"] == "```tool_code\nget_weather(city='Paris')\n```"
    assert "```tool_output\n22 degrees and sunny\n```" in folded[2]["content"]
    assert folded[2]["content"].endswith("And tomorrow?")
    prompt = render(family_template("google-gemma-2-2b-it.jinja"), folded, None)
    assert prompt.endswith("<start_of_turn>model\n")


# --- reading calls back ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
def test_calls_round_trip(fmt):
    one = [call("get_weather", city="Paris", unit="celsius")]
    two = [*one, call("get_time", city="Oslo")]
    content, calls = fmt.parse(fmt.call_text(one))
    assert content == "" and read(calls) == [("get_weather", {"city": "Paris", "unit": "celsius"})]
    assert calls[0]["type"] == "function" and calls[0]["function"]["arguments"] == '{"city":"Paris","unit":"celsius"}'
    shape = r"[A-Za-z0-9]{9}" if fmt.name == "mistral" else r"call_[0-9a-f]{24}"
    assert re.fullmatch(shape, calls[0]["id"])
    content, calls = fmt.parse(fmt.call_text(two))
    assert content == "" and read(calls) == [("get_weather", {"city": "Paris", "unit": "celsius"}),
                                             ("get_time", {"city": "Oslo"})]
    assert len({c["id"] for c in calls}) == 2
    assert fmt.parse("It is sunny in Paris.") == ("It is sunny in Paris.", [])


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.name != "llama3"],
                         ids=[i for i in FORMAT_IDS if i != "llama3"])
def test_text_before_a_call_stays_content(fmt):
    content, calls = fmt.parse("Let me look that up.\n\n" + fmt.call_text([call("get_time", city="Oslo")]))
    assert content == "Let me look that up." and read(calls) == [("get_time", {"city": "Oslo"})]


MALFORMED = {  # a call whose JSON (or Python) does not parse: the whole text stays content
    "generic": '<tool_call>\n{"name": "get_time", "arguments": {"city": Oslo}}\n</tool_call>',
    "hermes": 'Checking.\n<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}\n</tool_call>',
    "llama3": '{"name": "get_time", "parameters": {"city": "Oslo"}',
    "mistral-list": '[TOOL_CALLS][{"name": "get_time", "arguments": {"city": "Oslo"}]',
    "mistral-named": "[TOOL_CALLS]get_time[ARGS]{city: 'Oslo'}",
    "granite": '<|tool_call|>[{"name": "get_time", "arguments": {"city": "Oslo"}},]',
    "phi4": '<|tool_call|>[{"name": "get_time", "arguments": "{oops"}]<|/tool_call|>',
    "gemma3": "```tool_code\nget_time(city=Oslo)\n```",
}


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
def test_malformed_calls_stay_content(fmt):
    text = MALFORMED[FORMAT_IDS[FORMATS.index(fmt)]]
    assert fmt.parse(text) == (text, [])


def test_hermes_keeps_a_think_block_and_reads_a_call_left_open():
    text = '<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", ' \
           '"arguments": {"city": "Paris"}}\n</tool_call>'
    content, calls = HermesFormat().parse(text)
    assert content == "<think>\nThe user wants the weather.\n</think>" and len(calls) == 1
    content, calls = HermesFormat().parse('<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}}')
    assert content == "" and read(calls) == [("get_time", {"city": "Oslo"})]
    assert HermesFormat().parse('<tool_call>\n{"name": "f"}\n</tool_call>')[1][0]["function"]["arguments"] == "{}"


def test_llama3_variants():
    fmt = Llama3Format()
    expected = [("get_time", {"city": "Oslo"})]
    for text in ('<|python_tag|>{"name": "get_time", "parameters": {"city": "Oslo"}}',
                 '{"type": "function", "name": "get_time", "parameters": {"city": "Oslo"}}',
                 '  {"name": "get_time", "arguments": {"city": "Oslo"}}\n'):
        content, calls = fmt.parse(text)
        assert content == "" and read(calls) == expected, text
    content, calls = fmt.parse('{"name": "get_time", "parameters": {"city": "Oslo"}}; '
                               '{"name": "get_weather", "parameters": {"city": "Rome"}}')
    assert read(calls) == [*expected, ("get_weather", {"city": "Rome"})]
    content, calls = fmt.parse('Sure.<|python_tag|>{"name": "get_time", "parameters": {"city": "Oslo"}}')
    assert content == "Sure." and read(calls) == expected
    for text in ('Here: {"name": "get_time", "parameters": {}}', '{"name": "Bob", "age": 3} and more',
                 '{"city": "Oslo"}'):
        assert fmt.parse(text) == (text, []), text


def test_mistral_reads_both_forms_and_call_ids():
    expected = [("get_time", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})]
    for fmt in (MistralFormat(named=False), MistralFormat(named=True)):
        for text in ('[TOOL_CALLS][{"name": "get_time", "arguments": {"city": "Oslo"}, "id": "abcdefghi"}, '
                     '{"name": "get_weather", "arguments": {"city": "Rome"}}]',
                     '[TOOL_CALLS]get_time[ARGS]{"city": "Oslo"}[TOOL_CALLS]get_weather[CALL_ID]x1y2z3w4v'
                     '[ARGS]{"city": "Rome"}'):
            content, calls = fmt.parse(text)
            assert content == "" and read(calls) == expected, text
            assert all(re.fullmatch(r"[A-Za-z0-9]{9}", c["id"]) for c in calls)


def test_granite_and_phi4_lists():
    content, calls = GraniteFormat().parse('<|tool_call|>{"name": "get_time", "arguments": {"city": "Oslo"}}')
    assert content == "" and read(calls) == [("get_time", {"city": "Oslo"})]
    for text in ('<|tool_call|>[{"name": "get_time", "parameters": {"city": "Oslo"}}]<|/tool_call|>',
                 '<|tool_call|>[{"name": "get_time", "arguments": {"city": "Oslo"}}]'):
        content, calls = Phi4Format().parse(text)
        assert content == "" and read(calls) == [("get_time", {"city": "Oslo"})], text


def test_gemma_reads_tool_code_python_lists_and_json():
    fmt = Gemma3Format()
    text = "I'll check both.\n```tool_code\nget_time(city=\"Oslo\")\nget_weather(city='Rome', days=[1, 2], " \
           "metric=true, note=None)\n```"
    content, calls = fmt.parse(text)
    assert content == "I'll check both."
    assert read(calls) == [("get_time", {"city": "Oslo"}),
                           ("get_weather", {"city": "Rome", "days": [1, 2], "metric": True, "note": None})]
    for text in ('[get_time(city="Oslo")]', '{"name": "get_time", "parameters": {"city": "Oslo"}}',
                 '```json\n{"name": "get_time", "parameters": {"city": "Oslo"}}\n```'):
        content, calls = fmt.parse(text)
        assert content == "" and read(calls) == [("get_time", {"city": "Oslo"})], text
    for text in ('```tool_code\nget_time("Oslo")\n```', "```tool_code\nimport os\n```",
                 "```python\nget_time(city='Oslo')\n```", "[a link](https://example.com)"):
        assert fmt.parse(text) == (text, []), text


# --- streaming -------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt, text, opening", [
    (HermesFormat(), "Hello", None),
    (HermesFormat(), "Hello\n", 5),
    (HermesFormat(), "Hello <", 5),
    (HermesFormat(), "Hello\n<tool_ca", 5),
    (HermesFormat(), 'Hello\n<tool_call>\n{"na', 5),
    (HermesFormat(), "a <b>", None),
    (HermesFormat(), "<think>", None),
    (Llama3Format(), '{"na', 0),
    (Llama3Format(), '  {', 0),
    (Llama3Format(), "Sure", None),
    (Llama3Format(), "Sure <|python", 4),
    (MistralFormat(), "[TOOL_", 0),
    (MistralFormat(), "Done. [TOOL_CALLS]get", 5),
    (MistralFormat(), "[x]", None),
    (GraniteFormat(), "<|tool", 0),
    (Phi4Format(), "Ok <|tool_call|>[", 2),
    (Gemma3Format(), "`", 0),
    (Gemma3Format(), "```tool", 0),
    (Gemma3Format(), "```python\nprint(1)", None),
    (Gemma3Format(), "Sunny.\n```tool_code\n", 6),
    (Gemma3Format(), "[get_weather(", 0),
])
def test_call_opening(fmt, text, opening):
    assert fmt.call_opening(text) == opening


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.name != "llama3"],
                         ids=[i for i in FORMAT_IDS if i != "llama3"])
def test_what_streams_ahead_is_the_start_of_the_content(fmt):
    """Streamed a character at a time, as serve's Answer streams: the text sent before the end is where the
    content begins, and no part of a call's marker is ever in it."""
    text = "Let me look.\n" + fmt.call_text([call("get_time", city="Oslo")])
    shown = 0
    for end in range(1, len(text) + 1):
        opening = fmt.call_opening(text[:end])
        shown = max(shown, end if opening is None else opening)
    content, calls = fmt.parse(text)
    assert text[:shown] == content == "Let me look." and len(calls) == 1


# --- forcing a call --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vocabulary(vocabulary_gguf):  # noqa: F811 (the fixture imported above)
    from assistant.engine.model import Model

    model = Model(vocabulary_gguf, vocab_only=True)
    yield model
    model.close()


def accepts(model, grammar_text: str, text: str) -> bool:
    """Whether llama.cpp's grammar takes ``text`` (as the vocabulary tokenizes it) and then the end."""
    from assistant.engine.grammar import Grammar

    grammar = Grammar(model, grammar_text, 0, model.n_vocab)
    try:
        tokens = model.tokenize(text, add_special=False, parse_special=False)
        for position, token in enumerate(tokens):
            if not grammar.allows(position, token):
                return False
            grammar.append(token)
        return grammar.allows(len(tokens), model.eos_token)
    finally:
        grammar.close()


def forced_text(fmt, calls: list[dict]) -> str:
    """The calls as the forced grammar spells them: the family's own text, but JSON lines for Gemma."""
    if fmt.name != "gemma3":
        return fmt.call_text(calls)
    return "\n".join(json.dumps({"name": c["function"]["name"], "parameters": c["function"]["arguments"]})
                     for c in calls)


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
def test_the_forced_grammar_takes_exactly_the_calls_of_the_tools(fmt, vocabulary):
    one = [call("get_weather", city="Paris", unit="celsius")]
    two = [*one, call("get_time", city="Oslo")]
    single, parallel = fmt.forced_grammar([WEATHER, TIME], parallel=False), fmt.forced_grammar([WEATHER, TIME], True)
    opening = re.split(r'["{]', forced_text(fmt, one), maxsplit=1)[0]  # the literal marker before the JSON
    for literal in (opening, "get_weather", "get_time"):
        assert literal.replace("\n", "\\n") in single
    assert accepts(vocabulary, single, forced_text(fmt, one))
    assert read(fmt.parse(forced_text(fmt, one))[1]) == read(fmt.parse(fmt.call_text(one))[1])
    assert not accepts(vocabulary, single, forced_text(fmt, two))
    assert accepts(vocabulary, parallel, forced_text(fmt, two))
    assert read(fmt.parse(forced_text(fmt, two))[1]) == [("get_weather", {"city": "Paris", "unit": "celsius"}),
                                                         ("get_time", {"city": "Oslo"})]
    for wrong in (call("get_news", city="Paris"), call("get_weather", unit="celsius"),
                  call("get_weather", city="Paris", unit="kelvin"), call("get_weather", city="P" * 41)):
        assert not accepts(vocabulary, parallel, forced_text(fmt, [wrong])), wrong
    assert not accepts(vocabulary, single, "Sure! " + forced_text(fmt, one))


def test_a_schema_the_grammar_cannot_honour_is_refused_with_its_place():
    tool = {"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}}}
    with pytest.raises(UnsupportedSchema, match="properties.n.multipleOf"):
        HermesFormat().forced_grammar([tool], parallel=False)
