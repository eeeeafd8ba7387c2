"""What a request constrains its answer to, as a grammar every level of the chain follows: the JSON a
`response_format` asks for, or a call of a tool that `tool_choice` requires (in the model family's own format).
A schema feature the grammar cannot honour is a 400 naming where it is."""

from __future__ import annotations

from assistant.serve.protocol import ApiError, GenerationRequest
from assistant.serve.schema_grammar import UnsupportedSchema, schema_grammar


def answer_grammar(request: GenerationRequest, tool_format) -> str | None:
    """The grammar (GBNF) for ``request``'s answer, or None when it is free; ``tool_format`` is the target's
    (serve/tool_formats.py)."""
    if request.response_format is not None:
        where = "response_format.json_schema.schema"
        try:
            return schema_grammar(request.response_format.get("schema", {"type": "object"}))
        except UnsupportedSchema as error:
            raise ApiError(400, f"{where}.{error}", where) from None
    if not request.tools or request.tool_choice in ("auto", "none"):
        return None
    forced = request.tool_choice != "required"
    tools = [tool for tool in request.tools if not forced or tool["function"]["name"] == request.tool_choice]
    try:
        return tool_format.forced_grammar(tools, parallel=request.parallel_tool_calls and not forced)
    except UnsupportedSchema as error:
        index = next((i for i, tool in enumerate(request.tools) if tool in tools), 0) if len(tools) == 1 else None
        where = f"tools[{index}].function.parameters" if index is not None else "tools"
        raise ApiError(400, f"{where}: {error}", where) from None
