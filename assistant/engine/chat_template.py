"""Applies the chat template stored in a GGUF to a list of messages.

The template is Jinja (as written by Hugging Face); rendering it with jinja2 reproduces it exactly,
including default system prompts that llama.cpp's built-in template table leaves out. Without jinja2
(or for a template it cannot render) llama.cpp's own `llama_chat_apply_template` is used.
"""

from __future__ import annotations

import ctypes
import functools

from assistant.engine.backend import llama
from assistant.errors import AssistantError


def apply_chat_template(model, messages: list[dict]) -> str:
    """The prompt text for ``messages``, ending where the assistant's answer begins."""
    _check_messages(messages)
    template = model.chat_template
    if template is None:
        raise AssistantError(f"{model.path}: the GGUF stores no chat template (use a plain prompt instead)")
    try:
        return _render_jinja(template, model, messages)
    except ImportError:
        return _render_native(template, model, messages)


def chat_prompt_tokens(model, messages: list[dict]) -> list[int]:
    """The chat prompt as token ids, with exactly one BOS where the model wants one.

    Templates in the Llama 2 style write ``bos_token`` themselves, and the tokenizer of a model whose GGUF
    sets add_bos adds another: the duplicate is dropped (llama.cpp warns about the same double BOS)."""
    tokens = model.tokenize(apply_chat_template(model, messages), add_special=True, parse_special=True)
    if len(tokens) >= 2 and tokens[0] == tokens[1] == model.bos_token:
        del tokens[0]
    return tokens


def _check_messages(messages) -> None:
    if not messages:
        raise AssistantError("no messages to send")
    for message in messages:
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise AssistantError(f"a chat message needs 'role' and 'content': {message!r}")


def _render_jinja(template: str, model, messages: list[dict]) -> str:
    import jinja2

    try:
        compiled = _compile(template)
        return compiled.render(
            messages=messages,
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


@functools.lru_cache(maxsize=8)
def _compile(template: str):
    """Compiling takes milliseconds; a chat renders the same template on every turn."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = _raise_exception
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
