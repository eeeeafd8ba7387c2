"""The supported Hugging Face architectures, looked up by the `architectures` name in config.json.

One module per family (llama, qwen, gemma, phi3, granite, starcoder2), each declaring what llama.cpp's
graph for its GGUF architecture needs; `base` holds what they share.
"""

from __future__ import annotations

from assistant.errors import AssistantError
from converters.architectures import gemma, granite, llama, phi3, qwen, starcoder2
from converters.architectures.base import IGNORED_SUFFIXES, Architecture, permute_for_rope

FAMILIES = (llama, qwen, gemma, phi3, granite, starcoder2)
SUPPORTED: dict[str, type[Architecture]] = {name: cls for family in FAMILIES for name, cls in family.ARCHITECTURES.items()}

__all__ = ["IGNORED_SUFFIXES", "SUPPORTED", "Architecture", "permute_for_rope", "read_architecture"]


def read_architecture(config: dict, config_path) -> Architecture:
    names = config.get("architectures") or []
    if len(names) != 1 or names[0] not in SUPPORTED:
        shown = ", ".join(map(str, names)) or "none"
        raise AssistantError(f"{config_path}: unsupported architecture {shown} (supported: {', '.join(SUPPORTED)})")
    return SUPPORTED[names[0]].from_config(names[0], config, config_path)
