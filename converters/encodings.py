"""Encode one source tensor (raw BF16 bits, F16 or F32) as the bytes of one GGML type, vectorised."""

from __future__ import annotations

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

from converters import mxfp4

# output type names the user chooses -> the GGML type of their 2-D weights
WEIGHT_TYPES = {"bf16": Q.BF16, "f16": Q.F16, "q8_0": Q.Q8_0, "mxfp4": Q.MXFP4}
FILE_TYPES = {
    "bf16": gguf.LlamaFileType.MOSTLY_BF16, "f16": gguf.LlamaFileType.MOSTLY_F16,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "mxfp4": gguf.LlamaFileType.MOSTLY_MXFP4_MOE,
}
BLOCKED = (Q.Q8_0, Q.MXFP4)


def is_bf16_bits(array: np.ndarray) -> bool:
    return array.dtype == np.uint16


def as_float32(array: np.ndarray) -> np.ndarray:
    if is_bf16_bits(array):
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(np.float32, copy=False)


def as_bf16_bits(array: np.ndarray) -> np.ndarray:
    if is_bf16_bits(array):
        return array
    bits = array.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16  # round to nearest even
    return rounded.astype(np.uint16)


def byte_shape(shape: tuple[int, ...], qtype: Q) -> tuple[int, ...]:
    return gguf.quant_shape_to_byte_shape(shape, qtype)


def encode(array: np.ndarray, qtype: Q) -> np.ndarray:
    """The tensor's bytes in ``qtype`` as a uint8 array of its GGUF byte shape."""
    if qtype == Q.BF16:
        out = as_bf16_bits(array)
    elif qtype == Q.F32:
        out = as_float32(array)
    elif qtype == Q.F16:
        out = as_float32(array).astype(np.float16)
    elif qtype == Q.MXFP4:
        out = mxfp4.quantize(array, bf16_bits=is_bf16_bits(array))
    elif qtype == Q.Q8_0:
        out = gguf.quants.quantize(as_float32(array), Q.Q8_0)
    else:
        raise ValueError(f"no encoder for {qtype.name}")
    return np.ascontiguousarray(out).view(np.uint8).reshape(byte_shape(array.shape, qtype))
