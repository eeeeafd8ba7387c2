"""The MXFP4 copy's output projection: the type it is written in, and the GGUF key that records it.

Every token the copy drafts ends in a product with the whole vocabulary matrix (``output.weight``, or
``token_embd.weight`` for tied embeddings). Kept BF16 it is the larger part of a small model's copy, and of
its cost per token; its type is chosen by measured acceptance against cost per token (notes/converter.md).
The token embeddings follow the same type: tied models have only the one matrix, and an untied one's
embedding rows are read a token at a time, so their type changes the file's size, not the speed.
"""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

from converters import encodings

KEY = "assistant.output_projection.type"  # the GGML type name of the file's output projection, e.g. "MXFP4"
CHOICES = ("bf16", "q8_0", "mxfp4")
DEFAULT = "mxfp4"
UNRECORDED = "BF16"  # what copies written before the key existed kept it in
TENSORS = (gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.TOKEN_EMBD] + ".weight",
           gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.OUTPUT] + ".weight")


def wanted_type(choice: str) -> Q:
    return encodings.WEIGHT_TYPES[choice]


def projection_tensor(names) -> str:
    """The tensor llama.cpp multiplies the last hidden state by: output.weight, or token_embd.weight when tied."""
    names = set(names)
    return TENSORS[1] if TENSORS[1] in names else TENSORS[0]


def record(writer: gguf.GGUFWriter, qtype: Q) -> None:
    writer.add_string(KEY, qtype.name)


_SCALAR_SIZES = {V.UINT8: 1, V.INT8: 1, V.BOOL: 1, V.UINT16: 2, V.INT16: 2, V.UINT32: 4, V.INT32: 4,
                 V.FLOAT32: 4, V.UINT64: 8, V.INT64: 8, V.FLOAT64: 8}


def recorded(path) -> str | None:
    """The type recorded under KEY, or None (no key, or not a GGUF file we can read). Reads the metadata
    only, one key at a time, so `models list` stays instant on multi-gigabyte files."""
    try:
        with open(Path(path), "rb") as file:
            return _find_string(file, KEY)
    except (OSError, struct.error, ValueError, UnicodeDecodeError):
        return None


def _find_string(file, key: str) -> str | None:
    def read(fmt: str):
        size = struct.calcsize(fmt)
        data = file.read(size)
        if len(data) != size:
            raise ValueError("short file")
        return struct.unpack(fmt, data)[0]

    def string() -> bytes:
        return file.read(read("<Q"))

    def skip(kind: V) -> None:
        if kind == V.STRING:
            file.seek(read("<Q"), 1)
        elif kind == V.ARRAY:
            element, count = V(read("<I")), read("<Q")
            if element in _SCALAR_SIZES:
                file.seek(_SCALAR_SIZES[element] * count, 1)
            else:
                for _ in range(count):
                    skip(element)
        else:
            file.seek(_SCALAR_SIZES[kind], 1)

    if file.read(4) != b"GGUF" or read("<I") < 2:
        return None
    read("<Q")  # tensor count
    for _ in range(read("<Q")):
        name = string()
        kind = V(read("<I"))
        if name == key.encode() and kind == V.STRING:
            return string().decode()
        skip(kind)
    return None
