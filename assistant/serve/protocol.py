"""The OpenAI wire format: request bodies checked into plain dataclasses, and the response objects.

Every check failure is an ``ApiError`` carrying what OpenAI's own error object carries (status, message,
type, param, code), so a client library shows our messages the way it shows OpenAI's. Fields we do not use
(``user``, ``presence_penalty``…) are accepted and ignored, as other local servers do; fields that would
change the answer in a way we cannot honour (``n`` > 1, log-probabilities) are refused.

Tools and tool messages are checked here and handed to the chat template as Hugging Face passes them (a call's
arguments as an object); what they make the model write is read back by tool_formats.py."""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import asdict, dataclass, field

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_STOP_STRINGS = 16
FINISH_REASONS = {"eos": "stop", "stop": "stop", "max_tokens": "length", "context": "length", "cancelled": "stop"}


class ApiError(Exception):
    """A refused request: ``status`` is the HTTP status, the rest goes into the error object."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind = kind or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class GenerationRequest:
    """What both endpoints ask of the pipeline; ``messages`` for chat, ``prompt`` (+ ``suffix``) otherwise."""

    model: str
    max_tokens: int | None = None  # None: whatever room the context has left
    temperature: float | None = None  # None: the server's default
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    messages: list[dict] | None = None
    prompt: str | list[int] | None = None
    suffix: str | None = None
    tools: list[dict] = field(default_factory=list)  # OpenAI function tools, checked
    tool_choice: str = "auto"  # "auto", "none", "required", or the name of the one tool to call
    parallel_tool_calls: bool = True
    response_format: dict | None = None  # {"type": "json_object"} or {"type": "json_schema", "schema": {...}}
    grammar: str | None = None  # what the answer is held to (serve/constraints.py), set once the model is known


def parse_chat(body) -> GenerationRequest:
    body = _object(body)
    request = _common(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list of {role, content} objects", "messages")
    calls: dict[str, str] = {}  # tool call id -> function name, from the assistant messages so far
    request.messages = [_message(message, index, calls) for index, message in enumerate(messages)]
    _refuse_if(body.get("functions") or body.get("function_call"), "functions",
               "the legacy 'functions' field is not supported: send 'tools'")
    request.tools = _tools(body.get("tools"))
    request.tool_choice = _tool_choice(body.get("tool_choice"), request.tools)
    parallel = body.get("parallel_tool_calls", True)
    if parallel is not None and not isinstance(parallel, bool):
        raise ApiError(400, "'parallel_tool_calls' must be true or false", "parallel_tool_calls")
    request.parallel_tool_calls = parallel is not False
    request.response_format = _response_format(body.get("response_format"))
    if request.response_format and request.tools and request.tool_choice != "none":
        raise ApiError(400, "'response_format' and 'tools' cannot constrain one answer together: send one of them "
                       "(or tool_choice \"none\")", "response_format")
    _refuse_if(body.get("logprobs"), "logprobs", "log-probabilities are not supported")
    return request


def parse_completion(body) -> GenerationRequest:
    body = _object(body)
    request = _common(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        request.prompt = prompt
    elif isinstance(prompt, list) and prompt and all(_is_int(token) for token in prompt):
        request.prompt = [int(token) for token in prompt]
    elif isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, (str, list)) for p in prompt):
        raise ApiError(400, "a batch of several prompts is not supported: send one request per prompt", "prompt")
    else:
        raise ApiError(400, "'prompt' must be a string or a list of token ids", "prompt")
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise ApiError(400, "'suffix' must be a string", "suffix")
    request.suffix = suffix
    _refuse_if(body.get("echo"), "echo", "echo is not supported")
    _refuse_if(body.get("logprobs") is not None, "logprobs", "log-probabilities are not supported")
    best_of = body.get("best_of")
    _refuse_if(best_of not in (None, 1), "best_of", "best_of other than 1 is not supported")
    return request


def _object(body) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _common(body: dict) -> GenerationRequest:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' must be a model name (see GET /v1/models)", "model")
    request = GenerationRequest(model=model)
    for name in ("max_completion_tokens", "max_tokens"):  # the newer name wins when both are given
        if body.get(name) is not None:
            request.max_tokens = _integer(body, name, low=1)
            break
    if body.get("temperature") is not None:
        request.temperature = _number(body, "temperature", 0.0, 2.0)
    if body.get("top_p") is not None:
        request.top_p = _number(body, "top_p", 0.0, 1.0)
        if request.top_p == 0.0:
            raise ApiError(400, "'top_p' must be more than 0", "top_p")
    if body.get("top_k") is not None:
        request.top_k = _integer(body, "top_k", low=0)
    if body.get("seed") is not None:
        request.seed = _integer(body, "seed", low=-2**63, high=2**64 - 1) % 2**64
    request.stop = _stop(body.get("stop"))
    n = body.get("n")
    if n is not None and (not _is_int(n) or n != 1):
        raise ApiError(400, "only n = 1 is supported: send one request per answer", "n")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", "stream")
    request.stream = bool(stream)
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
            raise ApiError(400, "'stream_options' must be an object like {\"include_usage\": true}", "stream_options")
        request.include_usage = options.get("include_usage", False)
    return request


def _message(message, index: int, calls: dict[str, str]) -> dict:
    """One message as the chat template takes it; ``calls`` gathers the assistant's tool calls (id -> name), so a
    ``tool`` message answers one of them."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise ApiError(400, f"{where} must be an object with 'role' and 'content'", where)
    role = message.get("role")
    if role not in ROLES:
        raise ApiError(400, f"{where}.role must be one of {', '.join(ROLES)}, not {role!r}", f"{where}.role")
    content = message.get("content")
    if content is None and role == "assistant":
        content = ""
    if isinstance(content, list):  # content parts: only text can be shown to a text model
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"{where}.content: only text parts are supported", f"{where}.content")
            texts.append(part["text"])
        content = "".join(texts)
    if not isinstance(content, str):
        raise ApiError(400, f"{where}.content must be a string or a list of text parts", f"{where}.content")
    checked = {"role": ROLES[role], "content": content}
    if role == "assistant" and message.get("tool_calls"):
        checked["tool_calls"] = _history_calls(message["tool_calls"], f"{where}.tool_calls", calls)
    if role == "tool":
        call = message.get("tool_call_id")
        if not isinstance(call, str) or call not in calls:
            raise ApiError(400, f"{where}.tool_call_id must name a tool call of an earlier assistant message, "
                           f"not {call!r}", f"{where}.tool_call_id")
        checked.update(tool_call_id=call, name=calls[call])
    return checked


def _history_calls(tool_calls, where: str, calls: dict[str, str]) -> list[dict]:
    """An assistant message's tool calls, with their arguments as an object (how chat templates want them)."""
    if not isinstance(tool_calls, list):
        raise ApiError(400, f"{where} must be a list of tool calls", where)
    checked = []
    for index, call in enumerate(tool_calls):
        at = f"{where}[{index}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ApiError(400, f"{at} must be {{id, type: \"function\", function: {{name, arguments}}}}", at)
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                raise ApiError(400, f"{at}.function.arguments is not valid JSON", f"{at}.function.arguments") from None
        call_id = call.get("id") if isinstance(call.get("id"), str) else f"call_{index}"
        calls[call_id] = function["name"]
        checked.append({"id": call_id, "type": "function",
                        "function": {"name": function["name"], "arguments": arguments}})
    return checked


def _tools(tools) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ApiError(400, "'tools' must be a list of {type: \"function\", function: {...}} objects", "tools")
    checked, names = [], set()
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise ApiError(400, f"{where}.type must be \"function\"", f"{where}.type")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise ApiError(400, f"{where}.function must be an object with a name", f"{where}.function")
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise ApiError(400, f"{where}.function.name must be 1-64 letters, digits, '_' or '-', not {name!r}",
                           f"{where}.function.name")
        if name in names:
            raise ApiError(400, f"{where}.function.name {name!r} is given twice", f"{where}.function.name")
        names.add(name)
        description = function.get("description", "")
        if not isinstance(description, str):
            raise ApiError(400, f"{where}.function.description must be a string", f"{where}.function.description")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict):
            raise ApiError(400, f"{where}.function.parameters must be a JSON schema object",
                           f"{where}.function.parameters")
        check_schema(parameters, f"{where}.function.parameters")
        entry = {"name": name, "parameters": parameters}
        if description:
            entry["description"] = description
        checked.append({"type": "function", "function": entry})
    return checked


def _tool_choice(choice, tools: list[dict]) -> str:
    if choice is None:
        return "auto" if tools else "none"
    if choice in ("auto", "none", "required"):
        if choice == "required" and not tools:
            raise ApiError(400, "tool_choice \"required\" needs 'tools'", "tool_choice")
        return choice if tools else "none"
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(name, str):
        raise ApiError(400, "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                       "{type: \"function\", function: {name}}", "tool_choice")
    if name not in {tool["function"]["name"] for tool in tools}:
        raise ApiError(400, f"tool_choice names {name!r}, which is not one of 'tools'", "tool_choice")
    return name


def _response_format(response_format) -> dict | None:
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise ApiError(400, "response_format.json_schema.schema must be a JSON schema object",
                           "response_format.json_schema.schema")
        check_schema(schema, "response_format.json_schema.schema")
        return {"type": "json_schema", "schema": schema}
    raise ApiError(400, "response_format.type must be \"text\", \"json_object\" or \"json_schema\"",
                   "response_format.type")


def check_schema(schema: dict, where: str) -> None:
    """A JSON schema that is one by the JSON Schema meta-schema (its own $schema, else 2020-12)."""
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as error:
        path = "".join(f"[{part!r}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path)
        raise ApiError(400, f"{where}{path} is not a valid JSON schema: {error.message}", where) from None


def _stop(stop) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(text, str) for text in stops):
        raise ApiError(400, "'stop' must be a string or a list of strings", "stop")
    if len(stops) > MAX_STOP_STRINGS:
        raise ApiError(400, f"at most {MAX_STOP_STRINGS} stop strings", "stop")
    return [text for text in stops if text]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(body: dict, name: str, low: int, high: int | None = None) -> int:
    value = body[name]
    if not _is_int(value) or value < low or (high is not None and value > high):
        bound = f"an integer of at least {low}" if high is None else f"an integer from {low} to {high}"
        raise ApiError(400, f"'{name}' must be {bound}, not {value!r}", name)
    return value


def _number(body: dict, name: str, low: float, high: float) -> float:
    value = body[name]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise ApiError(400, f"'{name}' must be a number from {low:g} to {high:g}, not {value!r}", name)
    return float(value)


def _refuse_if(condition, param: str, message: str) -> None:
    if condition:
        raise ApiError(400, message, param)


# --- responses ------------------------------------------------------------------------------------

def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage(stats) -> dict:
    """OpenAI's counts; ``cached_tokens``: the prompt's opening found in the cache from the previous request."""
    return {"prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.new_tokens,
            "total_tokens": stats.prompt_tokens + stats.new_tokens,
            "prompt_tokens_details": {"cached_tokens": stats.cached_tokens}}


def speculation(stats, roles: list[str]) -> dict:
    """Our extension beside ``usage`` (as llama-server adds ``timings``): speed and what each level did."""
    return {"tokens_per_second": round(stats.tokens_per_second, 2), "seconds": round(stats.seconds, 4),
            "prompt_seconds": round(stats.prompt_seconds, 4), "first_token_seconds": round(stats.first_token_seconds, 4),
            "stop_reason": stats.stop_reason, "chain": roles,
            "levels": [_rounded(asdict(level)) for level in stats.levels], "shapes": stats.shapes}


def _rounded(record: dict) -> dict:
    return {key: round(value, 4) if isinstance(value, float) else value for key, value in record.items()}


def finish_reason(stats) -> str:
    return FINISH_REASONS.get(stats.stop_reason, "stop")
