"""A request's prompt as the target's token ids: the chat template for messages, the model's
fill-in-the-middle tokens for a completion with a suffix, the text or ids as given otherwise."""

from __future__ import annotations

from assistant.serve.protocol import ApiError, GenerationRequest


def prompt_tokens(pipeline, request: GenerationRequest) -> list[int]:
    if request.messages is not None:
        from assistant.engine.chat_template import chat_prompt_tokens

        messages, tools = with_tools(pipeline.target.chat_template, request)
        return chat_prompt_tokens(pipeline.target, messages, tools)
    if request.suffix is not None:
        return infill_tokens(pipeline, request.prompt, request.suffix)
    return pipeline.prompt_tokens(request.prompt)


def with_tools(template: str | None, request: GenerationRequest) -> tuple[list[dict], list[dict] | None]:
    """The messages and tools for the chat template: as they are where the template renders tools, else
    written into ordinary turns in the format the model's family calls tools in (tool_formats.py). With
    tool_choice "none" the model is not shown the tools."""
    from assistant.serve.tool_formats import template_supports_tools, tool_format

    shown = request.tools if request.tool_choice != "none" else []
    if template and template_supports_tools(template):
        return request.messages, shown or None
    history = any(message["role"] == "tool" or message.get("tool_calls") for message in request.messages)
    if not shown and not history:
        return request.messages, None
    return tool_format(template).plain_conversation(request.messages, shown), None


def infill_tokens(pipeline, prefix, suffix: str) -> list[int]:
    """Prefix-suffix-middle order, as code models with FIM tokens are trained (Qwen2.5-Coder, StarCoder…):
    the answer is the middle. A BOS goes first where the model adds one to every prompt."""
    model = pipeline.target
    fim = model.fim_tokens
    if fim is None:
        raise ApiError(400, f"the model {model.path.name} has no fill-in-the-middle tokens, so 'suffix' cannot be "
                       "used: send the prompt alone", "suffix", "fim_unsupported")
    if not isinstance(prefix, str):
        raise ApiError(400, "'suffix' needs a text prompt, not token ids", "prompt")
    begin, suffix_token, middle = fim

    def text(value: str) -> list[int]:  # the user's text never turns into special tokens
        return model.tokenize(value, add_special=False, parse_special=False)

    return model.tokenize("", add_special=True) + [begin, *text(prefix), suffix_token, *text(suffix), middle]
