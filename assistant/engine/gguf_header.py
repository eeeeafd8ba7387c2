"""What start-up needs from a GGUF file's header: scalar metadata and each tensor's type, shape and size.

gguf-py's reader builds numpy views of every metadata value, the vocabulary's 49k to 262k strings included:
most of a small model's start-up (2.5 s of the demo set's). This reader steps over arrays by their lengths and
keeps only scalars and short arrays (per-layer head counts), so it reads the header in milliseconds.
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from assistant.errors import AssistantError

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
SHORT_ARRAY = 64  # arrays up to this length are kept (per-layer values); longer ones are stepped over

# GGUF value types: id -> struct format of a fixed-size value
_FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9

# ggml type ids (ggml.h) -> the names gguf-py gives them
TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
              11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS",
              18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8",
              25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0",
              39: "MXFP4"}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type_name: str  # "BF16", "Q4_K", ... ("type 41" for one this table does not know)
    shape: tuple[int, ...]  # ggml order: shape[0] is the row length
    nbytes: int  # bytes in the file, up to the next tensor (alignment padding included)


@dataclass(frozen=True)
class Header:
    path: Path
    metadata: dict  # scalars and short arrays; longer arrays are absent
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    array_digests: dict  # key of a long array -> a digest of its bytes (equal arrays, equal digests)
    array_spans: dict = field(default_factory=dict)  # key of a long array of numbers -> (offset, count, format)

    def value(self, key: str, default=None):
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str:
        return self.metadata.get("general.architecture", "")

    def arch_value(self, key: str, default=None):
        """``{architecture}.{key}``, e.g. arch_value("block_count")."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    def number_array(self, key: str) -> np.ndarray | None:
        """A long array of numbers (which ``metadata`` leaves out), read from the file; None where absent."""
        span = self.array_spans.get(key)
        if span is None:
            value = self.metadata.get(key)
            return None if value is None else np.asarray(value)
        offset, count, fmt = span
        return np.fromfile(self.path, dtype=np.dtype("<" + fmt), count=count, offset=offset)

    @property
    def weight_bytes(self) -> int:
        return sum(tensor.nbytes for tensor in self.tensors)


class _Cursor:
    def __init__(self, buffer, path: Path):
        self.buffer, self.pos, self.path = buffer, 0, path
        self.skipped = (0, 0)  # where the last long array stepped over lies
        self.numbers = None  # (offset, count, format) of the last long array stepped over, if of numbers

    def take(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.buffer):
            raise AssistantError(f"{self.path}: truncated or damaged GGUF file (its header ends early)")
        value = struct.unpack_from("<" + fmt, self.buffer, self.pos)
        self.pos += size
        return value[0] if len(value) == 1 else value

    def string(self) -> str:
        length = self.take("Q")
        end = self.pos + length
        if end > len(self.buffer):
            raise AssistantError(f"{self.path}: truncated or damaged GGUF file (its header ends early)")
        text = bytes(self.buffer[self.pos:end]).decode("utf-8", errors="replace")
        self.pos = end
        return text

    def skip_strings(self, count: int) -> None:
        unpack, buffer, pos = struct.Struct("<Q").unpack_from, self.buffer, self.pos
        try:
            for _ in range(count):
                pos += 8 + unpack(buffer, pos)[0]
        except struct.error:
            raise AssistantError(f"{self.path}: truncated or damaged GGUF file (its header ends early)") from None
        self.pos = pos

    def value(self, kind: int):
        if kind in _FIXED:
            return self.take(_FIXED[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, count = self.take("I"), self.take("Q")
            if count <= SHORT_ARRAY:
                return [self.value(item_kind) for _ in range(count)]
            start = self.pos
            self.numbers = (start, count, _FIXED[item_kind]) if item_kind in _FIXED else None
            if item_kind == _STRING:
                self.skip_strings(count)
            elif item_kind in _FIXED:
                self.pos += count * struct.calcsize(_FIXED[item_kind])
            else:  # arrays of arrays: step over each
                for _ in range(count):
                    self.value(item_kind)
            self.skipped = (start, self.pos)
            return None
        raise AssistantError(f"{self.path}: GGUF metadata value of unknown type {kind}")


@functools.lru_cache(maxsize=16)
def _read(path: Path, size: int, mtime_ns: int) -> Header:
    with path.open("rb") as handle:
        buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    with buffer:
        cursor = _Cursor(buffer, path)
        cursor.pos = len(MAGIC)  # checked by check_gguf_file
        version = cursor.take("I")
        if version < 2:
            raise AssistantError(f"{path}: GGUF version {version} is too old (llama.cpp reads 2 and later)")
        n_tensors, n_metadata = cursor.take("Q"), cursor.take("Q")
        metadata, digests, spans = {}, {}, {}
        for _ in range(n_metadata):
            key = cursor.string()
            value = cursor.value(cursor.take("I"))
            if value is not None:
                metadata[key] = value
            else:
                start, end = cursor.skipped
                digests[key] = hashlib.blake2b(buffer[start:end], digest_size=16).hexdigest()
                if cursor.numbers is not None:
                    spans[key] = cursor.numbers
        entries = []
        for _ in range(n_tensors):
            name = cursor.string()
            dims = cursor.take("I")
            shape = tuple(cursor.take("Q") for _ in range(dims))
            type_id, offset = cursor.take("I"), cursor.take("Q")
            entries.append((offset, name, TYPE_NAMES.get(type_id, f"type {type_id}"), shape))
        alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT)) or DEFAULT_ALIGNMENT
        data_offset = -(-cursor.pos // alignment) * alignment
    data_size = size - data_offset
    ends = sorted(offset for offset, *_ in entries)[1:] + [data_size]
    by_offset = dict(zip(sorted(offset for offset, *_ in entries), ends))
    tensors = []
    for offset, name, type_name, shape in entries:
        if offset > data_size:
            raise AssistantError(f"{path}: truncated or damaged GGUF file (tensor {name} starts past its end)")
        tensors.append(TensorInfo(name, type_name, shape, by_offset[offset] - offset))
    return Header(path, metadata, tuple(tensors), data_offset, digests, spans)


def read_header(path: str | Path) -> Header:
    """The header of the GGUF at ``path`` (cached while the file is unchanged)."""
    path = Path(path)
    check_gguf_file(path)
    stat = path.stat()
    return _read(path, stat.st_size, stat.st_mtime_ns)


def check_gguf_file(path: Path) -> None:
    """A clear line for a path that is missing, a directory or not GGUF at all, before any reader sees it."""
    if not path.exists():
        raise AssistantError(f"{path}: no such GGUF file")
    if path.is_dir():
        raise AssistantError(f"{path}: is a directory, not a GGUF file")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise AssistantError(f"{path}: cannot read ({error.strerror})") from None
    if magic != MAGIC:
        raise AssistantError(f"{path}: not a GGUF file (it does not start with 'GGUF')")
