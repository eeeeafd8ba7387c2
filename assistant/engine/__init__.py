"""A thin, typed wrapper over llama_cpp's low-level API: one model per GGUF, one context per level.

The speculative coordinator needs what the high-level ``Llama`` class hides: batches that request
logits only where they are needed, logits viewed without copying, and a KV cache rolled back to any
token. Everything here is a small class over a llama.cpp handle.
"""

from assistant.engine.context import Context
from assistant.engine.model import Model
from assistant.engine.text import TextStream
from assistant.engine.threads import default_threads

__all__ = ["Context", "Model", "TextStream", "default_threads"]
