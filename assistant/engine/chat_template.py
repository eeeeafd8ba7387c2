"""Applies the chat template stored in a GGUF to a list of messages.

The template is Jinja (as written by Hugging Face); rendering it with jinja2 reproduces it exactly,
including default system prompts that llama.cpp's built-in template table leaves out. Without jinja2
(or for a template it cannot render) llama.cpp's own `llama_chat_apply_template` is used.

Only the template's own control tokens become control tokens: the messages (the user's text, attached
files, command output, earlier answers) are plain text to the tokenizer, so a file that contains
"<|im_start|>system" reaches the model as those characters and cannot open a system turn.
"""

from __future__ import annotations

import ctypes
import datetime
import functools
import json
import re
import secrets

from assistant.engine.backend import llama
from assistant.errors import AssistantError

# llama_token_attr bits (llama.h)
_UNKNOWN, _CONTROL, _LSTRIP, _RSTRIP = 1 << 0, 1 << 3, 1 << 7, 1 << 8


def apply_chat_template(model, messages: list[dict], tools: list[dict] | None = None) -> str:
    """The prompt text for ``messages``, ending where the assistant's answer begins; ``tools`` (OpenAI's function
    definitions) go to the template as Hugging Face passes them."""
    _check_messages(messages)
    return _render(_template(model), model, messages, tools)


def chat_prompt_tokens(model, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """The chat prompt as token ids: the template's control tokens as such, the messages as plain text,
    with exactly one BOS where the model wants one.

    Templates in the Llama 2 style write ``bos_token`` themselves, and the tokenizer of a model whose GGUF
    sets add_bos adds another: the duplicate is dropped (llama.cpp warns about the same double BOS)."""
    _check_messages(messages)
    template = _template(model)
    text = _render(template, model, messages, tools)
    parts = _template_and_message_parts(template, model, messages, text, tools)
    if parts is None:  # a template we cannot follow: the messages lose their control tokens' spelling instead
        text = _render(template, model, _without_control_text(model, messages), tools)
        tokens = model.tokenize(text, add_special=True, parse_special=True)
    else:
        lib = llama()
        tokens = [model.bos_token] if lib.llama_vocab_get_add_bos(model.vocab) else []
        tokens += _tokenize_parts(model, parts)
        tokens += [model.eos_token] if lib.llama_vocab_get_add_eos(model.vocab) else []
    if len(tokens) >= 2 and tokens[0] == tokens[1] == model.bos_token:
        del tokens[0]
    return tokens


def _template(model) -> str:
    template = model.chat_template
    if template is None:
        raise AssistantError(f"{model.path}: the GGUF stores no chat template (use a plain prompt instead)")
    return template


def _check_messages(messages) -> None:
    if not messages:
        raise AssistantError("no messages to send")
    for message in messages:
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise AssistantError(f"a chat message needs 'role' and 'content': {message!r}")


def _render(template: str, model, messages: list[dict], tools: list[dict] | None = None) -> str:
    try:
        return _render_jinja(template, model, messages, tools)
    except ImportError:
        return _render_native(template, model, messages)


# --- which characters of the prompt are the template's and which the messages' ----------------------
def _template_and_message_parts(template: str, model, messages: list[dict], text: str, tools=None):
    """``text`` cut into (piece, is_message_text) parts, or None where the template changes message text
    in a way we cannot follow (it branches on what a message says, or rewrites it beyond trimming).

    The template is rendered a second time with a unique placeholder for each message's content: what
    surrounds the placeholders is the template's own text. A template may trim a message, so each
    placeholder stands for the content as given or stripped, whichever makes the two renderings agree."""
    nonce = secrets.token_hex(8)
    contents, marked = [], []
    for message in messages:
        content = message["content"]
        if isinstance(content, str) and content:
            message = {**message, "content": f"\ue000{nonce}.{len(contents)}\ue001"}
            contents.append(content)
        marked.append(message)
    if not contents:
        return [(text, False)]
    try:
        skeleton = _render(template, model, marked, tools)
    except AssistantError:
        return None
    pieces = re.split(f"\ue000{nonce}\\.(\\d+)\ue001", skeleton)
    parts, at = [], 0
    for index in range(0, len(pieces), 2):
        own = pieces[index]
        if not text.startswith(own, at):
            return None
        parts.append((own, False))
        at += len(own)
        if index + 1 == len(pieces):
            break
        content, following = contents[int(pieces[index + 1])], pieces[index + 2]
        shown = next((form for form in (content, content.strip(), content.lstrip(), content.rstrip())
                      if text.startswith(form + following, at)), None)
        if shown is None:
            return None
        parts.append((shown, True))
        at += len(shown)
    return parts if at == len(text) else None


def _tokenize_parts(model, parts: list[tuple[str, bool]]) -> list[int]:
    """Control tokens are looked for in the template's pieces only; the text between two of them, the
    template's and the messages' together, is tokenized as one run without parsing control tokens, which is
    how llama.cpp splits a prompt at its control tokens, so an innocent prompt gets the very same ids."""
    runs: list[str | int] = [""]
    for piece, is_message in parts:
        for item in ([piece] if is_message else _split_at_control_tokens(model, piece)):
            if isinstance(item, str) and isinstance(runs[-1], str):
                runs[-1] += item
            else:
                runs.append(item)
    lib, tokens = llama(), []
    for index, run in enumerate(runs):
        if isinstance(run, int):
            tokens.append(run)
            continue
        before = runs[index - 1] if index > 0 else None
        after = runs[index + 1] if index + 1 < len(runs) else None
        if before is not None and lib.llama_vocab_get_attr(model.vocab, before) & _RSTRIP:
            run = run.lstrip(" \t\n\r\v\f")
        if after is not None and lib.llama_vocab_get_attr(model.vocab, after) & _LSTRIP:
            run = run.rstrip(" \t\n\r\v\f")
        if run:
            tokens += model.tokenize(run, add_special=False, parse_special=False)
    return tokens


def _split_at_control_tokens(model, piece: str) -> list[str | int]:
    """The template's own text as plain text and control token ids, in order."""
    lib, items, at = llama(), [], 0
    for token in model.tokenize(piece, add_special=False, parse_special=True):
        if not lib.llama_vocab_get_attr(model.vocab, token) & (_CONTROL | _UNKNOWN):
            continue
        spelled = model.token_text(token).decode("utf-8", errors="replace")
        found = piece.find(spelled, at)
        if found < 0:
            continue
        items += [piece[at:found], token]
        at = found + len(spelled)
    items.append(piece[at:])
    return items


def _without_control_text(model, messages: list[dict]) -> list[dict]:
    """The messages with a zero-width space after the first character of every control token's text in them:
    they read the same, and no longer tokenize as control tokens when the whole prompt is parsed."""
    lib, cleaned = llama(), []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            spelled = {model.token_text(token).decode("utf-8", errors="replace")
                       for token in model.tokenize(content, add_special=False, parse_special=True)
                       if lib.llama_vocab_get_attr(model.vocab, token) & (_CONTROL | _UNKNOWN)}
            for text in sorted(filter(None, spelled), key=len, reverse=True):
                content = content.replace(text, text[:1] + "\u200b" + text[1:])
            message = {**message, "content": content}
        cleaned.append(message)
    return cleaned


# --- rendering --------------------------------------------------------------------------------------
def _render_jinja(template: str, model, messages: list[dict], tools: list[dict] | None = None) -> str:
    import jinja2

    try:
        compiled = _compile(template)
        return compiled.render(
            messages=messages,
            tools=tools,
            add_generation_prompt=True,
            bos_token=model.token_string(model.bos_token),
            eos_token=model.token_string(model.eos_token),
        )
    except TemplateRefusal as refusal:
        raise AssistantError(f"{model.path}: chat template refused the conversation: {refusal}") from None
    except jinja2.TemplateError as error:
        raise AssistantError(f"{model.path}: cannot render the stored chat template ({error})") from None


class TemplateRefusal(Exception):
    """Raised by a template's own raise_exception(), e.g. for roles it does not support."""


def _raise_exception(message):
    raise TemplateRefusal(message)


def _strftime_now(format: str) -> str:
    """Today's date as templates print it (Mistral's and Granite's put it in their system prompt)."""
    return datetime.datetime.now().strftime(format)


def _tojson(value, indent=None, separators=None, sort_keys=False, ensure_ascii=False) -> str:
    """JSON as Hugging Face renders it for templates: keys in their order, text unescaped (jinja2's own filter
    sorts keys and escapes HTML characters, so tool schemas would reach the model reordered and escaped)."""
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


@functools.lru_cache(maxsize=8)
def _compile(template: str):
    """Compiling takes milliseconds; a chat renders the same template on every turn."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    environment.filters["tojson"] = _tojson
    return environment.from_string(template)


def _render_native(template: str, model, messages: list[dict]) -> str:
    lib = llama()
    encoded = [(m["role"].encode(), m["content"].encode()) for m in messages]
    chat = (lib.llama_chat_message * len(encoded))(*[lib.llama_chat_message(r, c) for r, c in encoded])
    size = 2 * sum(len(r) + len(c) for r, c in encoded) + 256
    for _ in range(2):
        buffer = ctypes.create_string_buffer(size)
        written = lib.llama_chat_apply_template(template.encode(), chat, len(encoded), True, buffer, size)
        if written < 0:
            raise AssistantError(f"{model.path}: llama.cpp does not know this chat template (install jinja2)")
        if written <= size:
            return buffer.raw[:written].decode("utf-8", errors="replace")
        size = written
    raise AssistantError(f"{model.path}: chat template output did not fit")
