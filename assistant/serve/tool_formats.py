"""How each model family writes a tool call, so that OpenAI `tools` reach the model in its own format and its
answer comes back as OpenAI `tool_calls`.

A family is recognised from the chat template's text. Where the template renders `tools` itself, only
parse(), call_opening() and forced_grammar() are needed; where it does not, plain_conversation() writes the
tools, the earlier calls and their results into ordinary messages in the format the family was trained on.

    hermes   <tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>, one block per call (Qwen, Hermes,
             Granite 4)
    llama3   {"name": "f", "parameters": {...}} as the whole answer, maybe after <|python_tag|>, ";" between
    mistral  [TOOL_CALLS][{"name": "f", "arguments": {...}}] or, newer, [TOOL_CALLS]f[ARGS]{...} per call
    granite  <|tool_call|>[{"name": "f", "arguments": {...}}] (Granite 3)
    phi4     <|tool_call|>[{"name": "f", "arguments": {...}}]<|/tool_call|> (Phi-4-mini)
    gemma3   ```tool_code\\nf(a=1)\\n``` (Gemma 3 has no tool markup: Google documents a prompt), or JSON
    generic  <tool_call>{"name": "f", "arguments": {...}}</tool_call>, asked for in the system message
"""

from __future__ import annotations

import ast
import json
import re
import secrets
import string

from jinja2 import meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

_DECODER = json.JSONDecoder()
_EXAMPLE = [{"function": {"name": "function_name", "arguments": {"argument": "value"}}}]
_MISTRAL_ID = string.ascii_letters + string.digits


def tool_format(template: str | None) -> "ToolFormat":
    """The family's format, from markers only its templates contain (checked from the most specific)."""
    text = template or ""
    if "[TOOL_CALLS]" in text:
        return MistralFormat(named="[ARGS]" in text)
    if "<|tool_call|>" in text and "<|start_of_role|>" in text:
        return GraniteFormat()
    if "<|tool|>" in text or "<|/tool_call|>" in text:
        return Phi4Format()
    if "<tool_call>" in text:
        return HermesFormat()
    if "<|python_tag|>" in text or "ipython" in text:
        return Llama3Format()
    if "<start_of_turn>" in text:
        return Gemma3Format()
    return ToolFormat()


def template_supports_tools(template: str) -> bool:
    """Whether the template reads the variable `tools` (not merely a message's "tools" key, as Phi-4-mini's)."""
    try:
        parsed = ImmutableSandboxedEnvironment().parse(template)
    except Exception:  # a template jinja2 cannot read renders nothing of ours either
        return False
    return "tools" in meta.find_undeclared_variables(parsed)


class ToolFormat:
    """The generic format, for a template without tool support: asked for in the system message, read like
    hermes. Subclasses change the markers, the JSON inside them, or both."""

    name = "generic"
    arguments_key = "arguments"
    markers: tuple[str, ...] = ("<tool_call>",)  # a call begins at one of these
    call_wrap = ("<tool_call>\n", "\n</tool_call>")  # around each call's JSON object
    frame = ("", "")  # around all the calls of an answer
    separator = "\n"  # between two calls
    result_open, result_close = "<tool_response>\n", "\n</tool_response>"

    # --- the prompt --------------------------------------------------------------------------------
    def system_text(self, tools: list[dict]) -> str:
        """The tools and the exact way to call them, for the system message of a template without tools."""
        listed = "\n".join(json.dumps(tool["function"], ensure_ascii=False) for tool in tools)
        return ("You can call functions to help answer. Their definitions (JSON schemas):\n"
                f"<tools>\n{listed}\n</tools>\n\n"
                f"To call one, answer with exactly this and nothing after it:\n{self.call_text(_EXAMPLE)}\n"
                "For several calls, write one after another. Each result comes back to you as "
                f"{self.result_open.strip()}...{self.result_close.strip()}.")

    def call_text(self, calls: list[dict]) -> str:
        """OpenAI tool calls (arguments as JSON text or an object) written as this family's model writes them,
        spaced as forced_grammar() spaces them."""
        objects = [json.dumps(_as_object(call, self.arguments_key), ensure_ascii=False) for call in calls]
        return self.frame[0] + self.separator.join(self.call_wrap[0] + text + self.call_wrap[1]
                                                   for text in objects) + self.frame[1]

    def result_text(self, content: str) -> str:
        return f"{self.result_open}{content}{self.result_close}"

    def plain_conversation(self, messages: list[dict], tools: list[dict]) -> list[dict]:
        """``messages`` for a template that renders neither tools nor tool messages: the tools described in the
        system message, each earlier call written out as the model writes it, each result as a user turn
        (consecutive user turns joined, for templates that insist on alternating roles). Without ``tools`` (a
        request that no longer offers them) only the history is rewritten."""
        folded: list[dict] = []
        for message in messages:
            role, content = message["role"], message.get("content") or ""
            if role == "assistant" and message.get("tool_calls"):
                content = "\n".join(part for part in (content, self.call_text(message["tool_calls"])) if part)
            elif role == "tool":
                role, content = "user", self.result_text(content)
            if folded and role == "user" and folded[-1]["role"] == "user":
                folded[-1]["content"] += "\n\n" + content
            else:
                folded.append({"role": role, "content": content})
        return self._with_instructions(folded, self.system_text(tools)) if tools else folded

    def _with_instructions(self, messages: list[dict], text: str) -> list[dict]:
        if messages and messages[0]["role"] == "system":
            return [{"role": "system", "content": f"{messages[0]['content']}\n\n{text}".lstrip()}, *messages[1:]]
        return [{"role": "system", "content": text}, *messages]

    # --- the answer --------------------------------------------------------------------------------
    def parse(self, text: str) -> tuple[str, list[dict]]:
        """(content left over, OpenAI tool calls). A call whose JSON does not parse stays in the content."""
        pieces: list[str | dict] = []
        at = 0
        while (start := _first_marker(text, self.markers, at)) is not None:
            found = self._read_call(text, start)
            if found is None:  # not a call after all: keep its marker as text and look further on
                end = start + len(next(m for m in self.markers if text.startswith(m, start)))
                _add_text(pieces, text[at:end])
            else:
                calls, end = found
                _add_text(pieces, text[at:start])
                pieces += calls
            at = end
        _add_text(pieces, text[at:])
        return _content(pieces), [piece for piece in pieces if isinstance(piece, dict)]

    def _read_call(self, text: str, start: int) -> tuple[list[dict], int] | None:
        """The calls written at ``start`` (where a marker is) and where they end, or None."""
        value, at = _json_at(text, start + len("<tool_call>"))
        call = self._call(value)
        if call is None:
            return None
        closing = _skip_space(text, at)
        if text.startswith("</tool_call>", closing):
            return [call], closing + len("</tool_call>")
        return ([call], closing) if closing == len(text) else None  # the answer may stop before the close

    def _call(self, value) -> dict | None:
        return _openai_call(value, (self.arguments_key, "parameters", "arguments"), self.new_id)

    def _bare_call(self, value) -> dict | None:
        """A call written without markers must name its arguments too: {"name": "Bob"} is only JSON."""
        inner = value.get("function", value) if isinstance(value, dict) else None
        if not isinstance(inner, dict) or not {"parameters", "arguments"} & inner.keys():
            return None
        return self._call(value)

    def new_id(self) -> str:
        return "call_" + secrets.token_hex(12)

    def call_opening(self, text: str) -> int | None:
        """Where a call begins or may be beginning in the answer so far (whitespace before it included, so that
        none is streamed ahead of a call), or None: text before it may be streamed."""
        opening = self._opening(text)
        if opening is None:
            trailing = len(text) - len(text.rstrip())
            return len(text) - trailing if trailing else None
        return len(text[:opening].rstrip())

    def _opening(self, text: str) -> int | None:
        return _marker_or_prefix(text, self.markers)

    # --- forcing a call ----------------------------------------------------------------------------
    def forced_grammar(self, tools: list[dict], parallel: bool) -> str:
        """GBNF whose sentences are one call (``parallel``: one or more) of one of ``tools``, in this format,
        the arguments held to each tool's `parameters` schema; a schema it cannot honour raises
        schema_grammar.UnsupportedSchema."""
        from assistant.serve.schema_grammar import BASE_RULES, schema_rules

        if not tools:
            raise ValueError("a forced tool call needs at least one tool")
        alternatives, lines = [], []
        for index, tool in enumerate(tools):
            start, rules = schema_rules(tool["function"].get("parameters") or {"type": "object"}, f"args{index}")
            lines += [f"call{index} ::= {self._call_grammar(tool['function']['name'], start)}", *rules]
            alternatives.append(f"call{index}")
        calls = f"call ({_gbnf(self.separator)} call)*" if parallel and self.separator else \
            "call+" if parallel else "call"
        root = " ".join([*(_gbnf(text) for text in self.frame[:1] if text), calls,
                         *(_gbnf(text) for text in self.frame[1:] if text)])
        return "\n".join([f"root ::= {root}", f"call ::= {' | '.join(alternatives)}", *lines, BASE_RULES])

    def _call_grammar(self, name: str, arguments_rule: str) -> str:
        """One call of tool ``name``, its arguments given by the rule ``arguments_rule``."""
        head = f'{self.call_wrap[0]}{{"name": {json.dumps(name)}, "{self.arguments_key}": '
        return f"{_gbnf(head)} {arguments_rule} {_gbnf('}' + self.call_wrap[1])}"


class HermesFormat(ToolFormat):
    """Qwen2.5, Qwen3 (its <think> block stays in the content), Hermes 2/3, Granite 4."""

    name = "hermes"

    def system_text(self, tools: list[dict]) -> str:
        listed = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
        return ("# Tools\n\nThese functions are available to you, their signatures inside <tools></tools>:\n"
                f"<tools>\n{listed}\n</tools>\n\n"
                "To call one, write a JSON object with its name and arguments inside <tool_call></tool_call>, "
                f"one block per call:\n{self.call_text(_EXAMPLE)}")


class Llama3Format(ToolFormat):
    """Llama 3.1-3.3: the whole answer is the call's JSON (ipython mode adds <|python_tag|> before it)."""

    name = "llama3"
    arguments_key = "parameters"
    markers = ("<|python_tag|>",)
    call_wrap = ("", "")
    separator = "; "

    def system_text(self, tools: list[dict]) -> str:
        listed = "\n\n".join(json.dumps(tool, ensure_ascii=False, indent=4) for tool in tools)
        return ("These functions are available. To call one, your whole answer is a JSON object "
                f"{self.call_text(_EXAMPLE)}: the function's name, and its arguments with literal values.\n\n"
                f"{listed}")

    def parse(self, text: str) -> tuple[str, list[dict]]:
        tag = text.find("<|python_tag|>")
        before, body = (text[:tag], text[tag + len("<|python_tag|>"):]) if tag >= 0 else ("", text)
        calls = _json_calls(body, self._bare_call, separators=";")
        return (before.strip(), calls) if calls else (text, [])

    def _opening(self, text: str) -> int | None:
        stripped = text.lstrip()
        if stripped.startswith(("{", "[")):
            return len(text) - len(stripped)
        return _marker_or_prefix(text, self.markers)


class MistralFormat(ToolFormat):
    """Mistral: a JSON list after [TOOL_CALLS] (Nemo, Small 3.1), or ``name[ARGS]{...}`` after [TOOL_CALLS] for
    each call (Small 3.2, Devstral, Ministral 3). Both are read whichever the template writes; ``named`` picks
    the one written and forced. Mistral's templates refuse call ids that are not 9 letters or digits."""

    name = "mistral"
    markers = ("[TOOL_CALLS]",)
    call_wrap = ("", "")
    result_open, result_close = "[TOOL_RESULTS]", "[/TOOL_RESULTS]"
    _NAME = re.compile(r"\s*([A-Za-z0-9_.-]+)(?:\[CALL_ID\][A-Za-z0-9]+)?\[ARGS\]")

    def __init__(self, named: bool = False):
        self.named = named
        self.frame = ("", "") if named else ("[TOOL_CALLS][", "]")
        self.separator = "" if named else ", "

    def new_id(self) -> str:
        return "".join(secrets.choice(_MISTRAL_ID) for _ in range(9))

    def call_text(self, calls: list[dict]) -> str:
        if not self.named:
            return super().call_text(calls)
        return "".join(f"[TOOL_CALLS]{call['function']['name']}[ARGS]"
                       + json.dumps(_arguments(call), ensure_ascii=False) for call in calls)

    def _read_call(self, text: str, start: int) -> tuple[list[dict], int] | None:
        at = start + len("[TOOL_CALLS]")
        named = self._NAME.match(text, at)
        if named:
            arguments, end = _json_at(text, named.end())
            call = self._call({"name": named.group(1), "arguments": arguments})
            return ([call], end) if call else None
        value, end = _json_at(text, at)
        calls = [self._call(item) for item in value] if isinstance(value, list) and value else [None]
        return (calls, end) if all(calls) else None

    def _call_grammar(self, name: str, arguments_rule: str) -> str:
        if self.named:
            return f"{_gbnf('[TOOL_CALLS]' + name + '[ARGS]')} {arguments_rule}"
        return super()._call_grammar(name, arguments_rule)


class GraniteFormat(ToolFormat):
    """Granite 3.x: <|tool_call|> then a JSON list of calls."""

    name = "granite"
    markers = ("<|tool_call|>",)
    call_wrap = ("", "")
    closing = ""  # after the list
    frame = ("<|tool_call|>[", "]")
    separator = ", "

    def _read_call(self, text: str, start: int) -> tuple[list[dict], int] | None:
        value, end = _json_at(text, start + len(self.markers[0]))
        value = [value] if isinstance(value, dict) else value
        calls = [self._call(item) for item in value] if isinstance(value, list) and value else [None]
        if not all(calls):
            return None
        closing = _skip_space(text, end)
        if self.closing and text.startswith(self.closing, closing):  # it may be missing where the answer stopped
            end = closing + len(self.closing)
        return calls, end


class Phi4Format(GraniteFormat):
    """Phi-4-mini: the tools go in the system turn between <|tool|> and <|/tool|> (a "tools" key of the system
    message in its template); calls come as <|tool_call|>[...]<|/tool_call|>, "arguments" or "parameters"."""

    name = "phi4"
    closing = "<|/tool_call|>"
    frame = ("<|tool_call|>[", "]<|/tool_call|>")
    result_open, result_close = "<|tool_response|>", "<|/tool_response|>"

    def system_text(self, tools: list[dict]) -> str:
        listed = json.dumps([tool["function"] for tool in tools], ensure_ascii=False)
        return (f"To call functions, answer with only {self.call_text(_EXAMPLE)}, one object in the list per "
                f"call.<|tool|>{listed}<|/tool|>")


class Gemma3Format(ToolFormat):
    """Gemma 3, prompted as Google documents: the model answers with Python calls in a ```tool_code block
    (keyword arguments, literal values) and gets results in a ```tool_output block. Also read: a bare list
    ``[f(a=1), g()]`` and JSON ``{"name": ..., "parameters": ...}``, the JSON form being the one forced."""

    name = "gemma3"
    arguments_key = "parameters"
    markers = ("```tool_code",)
    call_wrap = ("", "")  # forced_grammar()'s JSON objects, one per line
    result_open, result_close = "```tool_output\n", "\n```"
    _BLOCK = re.compile(r"```tool_code[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)

    def system_text(self, tools: list[dict]) -> str:
        listed = "\n".join(json.dumps(tool["function"], ensure_ascii=False) for tool in tools)
        return ("You can use these Python functions, described as JSON schemas:\n"
                f"{listed}\n\n"
                "To call them, answer with only a block like this, one call per line, every argument given by "
                f"keyword with a literal value:\n{self.call_text(_EXAMPLE)}\n"
                "Each function's result comes back to you in a ```tool_output block; use it to answer, or call "
                "again.")

    def call_text(self, calls: list[dict]) -> str:
        lines = [f"{call['function']['name']}("
                 + ", ".join(f"{key}={value!r}" for key, value in _arguments(call).items()) + ")" for call in calls]
        return "```tool_code\n" + "\n".join(lines) + "\n```"

    def _with_instructions(self, messages: list[dict], text: str) -> list[dict]:
        """Gemma has no system turn (Gemma 2's template refuses one, Gemma 3's folds it into the first user
        turn): the instructions open the first user message."""
        if messages and messages[0]["role"] == "system":
            text, messages = f"{messages[0]['content']}\n\n{text}", messages[1:]
        if messages and messages[0]["role"] == "user":
            return [{"role": "user", "content": f"{text}\n\n{messages[0]['content']}"}, *messages[1:]]
        return [{"role": "user", "content": text}, *messages]

    def parse(self, text: str) -> tuple[str, list[dict]]:
        if "```tool_code" in text:
            pieces: list[str | dict] = []
            at = 0
            for block in self._BLOCK.finditer(text):
                calls = _python_calls(block.group(1), self.new_id)
                _add_text(pieces, text[at:block.start()] if calls else text[at:block.end()])
                pieces += calls or []
                at = block.end()
            _add_text(pieces, text[at:])
            return _content(pieces), [piece for piece in pieces if isinstance(piece, dict)]
        body = text.strip()
        fenced = re.fullmatch(r"```(?:json)?\s*\n(.*?)\n?```", body, re.DOTALL)
        body = fenced.group(1) if fenced else body
        calls = _python_calls(body, self.new_id) if body.startswith("[") else None
        calls = calls or _json_calls(body, self._bare_call, separators=";")
        return ("", calls) if calls else (text, [])

    def _opening(self, text: str) -> int | None:
        stripped = text.lstrip()
        if stripped.startswith(("{", "[", "```json")) or (stripped and "```json".startswith(stripped)):
            return len(text) - len(stripped)
        return _marker_or_prefix(text, self.markers)


# --- reading calls ----------------------------------------------------------------------------------
def _openai_call(value, keys: tuple[str, ...], new_id) -> dict | None:
    """An OpenAI tool call from a model's {"name", <arguments key>} object, or None if it is not one."""
    if not isinstance(value, dict) or value.get("type", "function") != "function":
        return None
    if isinstance(value.get("function"), dict):  # {"type": "function", "function": {...}}
        value = value["function"]
    name = value.get("name")
    arguments = next((value[key] for key in keys if key in value), {})
    if isinstance(arguments, str):  # some models write the arguments as JSON text
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return None
    if not isinstance(name, str) or not name or not isinstance(arguments, dict):
        return None
    return {"id": new_id(), "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))}}


def _json_at(text: str, at: int):
    """(the JSON value starting at ``at`` after whitespace, where it ends), or (None, at)."""
    try:
        return _DECODER.raw_decode(text, _skip_space(text, at))
    except ValueError:
        return None, at


def _json_calls(body: str, read, separators: str) -> list[dict] | None:
    """Calls when ``body`` is nothing but JSON call objects (or lists of them), ``separators`` or whitespace
    between them; else None."""
    calls, at = [], _skip_space(body, 0)
    while at < len(body):
        value, end = _json_at(body, at)
        if end == at:
            return None
        for item in value if isinstance(value, list) and value else [value]:
            call = read(item)
            if call is None:
                return None
            calls.append(call)
        at = _skip_space(body, end)
        while at < len(body) and body[at] in separators:
            at = _skip_space(body, at + 1)
    return calls or None


def _python_calls(code: str, new_id) -> list[dict] | None:
    """Calls from Python call expressions (one per line, or in a list): keyword arguments with literal
    values only (true/false/null accepted as JSON spells them). None if the code is anything else."""
    try:
        tree = ast.parse(code.strip())
    except (SyntaxError, ValueError):
        return None
    nodes = []
    for statement in tree.body:
        if not isinstance(statement, ast.Expr):
            return None
        value = statement.value
        nodes += value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
            return None
        try:
            arguments = {keyword.arg: ast.literal_eval(_JsonNames().visit(keyword.value)) for keyword in node.keywords
                         if keyword.arg is not None}
            if len(arguments) != len(node.keywords):
                return None
            text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        except (ValueError, TypeError, SyntaxError):
            return None
        calls.append({"id": new_id(), "type": "function", "function": {"name": node.func.id, "arguments": text}})
    return calls or None


class _JsonNames(ast.NodeTransformer):
    _VALUES = {"true": True, "false": False, "null": None}

    def visit_Name(self, node):
        return ast.Constant(self._VALUES[node.id]) if node.id in self._VALUES else node


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _first_marker(text: str, markers: tuple[str, ...], at: int) -> int | None:
    found = [index for index in (text.find(marker, at) for marker in markers) if index >= 0]
    return min(found) if found else None


def _marker_or_prefix(text: str, markers: tuple[str, ...]) -> int | None:
    """Where the first marker is, or where a marker's beginning ends the text (it may be one, once complete)."""
    found = _first_marker(text, markers, 0)
    if found is not None:
        return found
    for size in range(min(len(text), max(map(len, markers)) - 1), 0, -1):
        if any(marker.startswith(text[-size:]) for marker in markers):
            return len(text) - size
    return None


def _add_text(pieces: list, text: str) -> None:
    if pieces and isinstance(pieces[-1], str):
        pieces[-1] += text
    elif text:
        pieces.append(text)


def _content(pieces: list) -> str:
    """The text around the calls; the whitespace that separated text from a call goes with the call."""
    parts = []
    for index, piece in enumerate(pieces):
        if isinstance(piece, dict):
            continue
        if index > 0:
            piece = piece.lstrip()
        if index + 1 < len(pieces):
            piece = piece.rstrip()
        if piece:
            parts.append(piece)
    return "\n".join(parts)


# --- writing calls ----------------------------------------------------------------------------------
def _arguments(call: dict) -> dict:
    arguments = call["function"].get("arguments") or {}
    return json.loads(arguments) if isinstance(arguments, str) else arguments


def _as_object(call: dict, key: str) -> dict:
    return {"name": call["function"]["name"], key: _arguments(call)}


def _gbnf(text: str) -> str:
    """``text`` as a GBNF string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + escaped.replace("\t", "\\t") + '"'
