"""Read a SentencePiece `tokenizer.model` (a protobuf ModelProto) without the sentencepiece package.

Its pieces (text, score, type), the model type and the normalizer's flags are all a GGUF vocabulary needs, and
the format is a handful of protobuf fields, so a small reader here spares every user a native dependency.
Field numbers are those of sentencepiece_model.proto.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from assistant.errors import AssistantError

MODEL_TYPES = {1: "unigram", 2: "BPE", 3: "word", 4: "char"}
NORMAL = 1  # SentencePiece piece types share GGUF's token type numbers: NORMAL 1 ... BYTE 6


@dataclass(frozen=True)
class SentencePieceModel:
    pieces: list[tuple[str, float, int]]  # (text, score, type) in id order
    model_type: str
    normalizer: str  # "identity" leaves text as it is; others rewrite it (NFKC...) before splitting
    add_dummy_prefix: bool  # a space before the text, so its first word looks like any other
    remove_extra_whitespaces: bool  # runs of spaces collapsed, leading and trailing ones dropped


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes):
    """(field number, value) of one message: ints for varints, bytes for the rest."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        wire = key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = data[pos : pos + size], pos + size
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        else:
            raise ValueError(f"unknown wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated")
        yield key >> 3, value


def _piece(data: bytes) -> tuple[str, float, int]:
    text, score, kind = "", 0.0, NORMAL
    for number, value in _fields(data):
        if number == 1:
            text = value.decode("utf-8")
        elif number == 2:
            (score,) = struct.unpack("<f", value)
        elif number == 3:
            kind = value
    return text, score, kind


def read_sentencepiece_model(path: Path) -> SentencePieceModel:
    try:
        pieces, model_type, normalizer, dummy_prefix, extra_spaces = [], 1, "nmt_nfkc", True, True
        for number, value in _fields(path.read_bytes()):
            if number == 1:
                pieces.append(_piece(value))
            elif number == 2:
                model_type = next((v for n, v in _fields(value) if n == 3), model_type)
            elif number == 3:
                for field, flag in _fields(value):
                    if field == 1:
                        normalizer = flag.decode("utf-8")
                    elif field == 3:
                        dummy_prefix = bool(flag)
                    elif field == 4:
                        extra_spaces = bool(flag)
    except IndexError:
        raise AssistantError(f"{path}: not a SentencePiece model (truncated)") from None
    except (ValueError, UnicodeDecodeError, struct.error) as error:
        raise AssistantError(f"{path}: not a SentencePiece model ({error})") from None
    if not pieces:
        raise AssistantError(f"{path}: not a SentencePiece model (no pieces)")
    return SentencePieceModel(pieces, MODEL_TYPES.get(model_type, str(model_type)), normalizer, dummy_prefix,
                              extra_spaces)
