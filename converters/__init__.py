"""Hugging Face safetensors checkpoints -> GGUF (BF16 target, MXFP4 direct cast, Q8_0, F16)."""

from converters.pipeline import check_metadata, convert

__all__ = ["convert"]
