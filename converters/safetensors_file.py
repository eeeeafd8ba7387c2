"""Read Hugging Face safetensors checkpoints one tensor at a time, validating the header before any output,
and write them one tensor at a time (for padded and random checkpoints).

We parse the header ourselves (8-byte length, JSON) so every defect becomes a one-line error naming the file,
and map the data read-only so a tensor costs memory only while it is being converted.
"""

from __future__ import annotations

import json
import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from assistant.errors import AssistantError

# safetensors dtype name -> (numpy dtype used to view the bytes, bytes per element)
SUPPORTED_DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}
KNOWN_DTYPES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "F4": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}
MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_ELEMENTS = 2**63 - 1  # numpy and GGUF count elements in int64


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: "SafetensorsFile"
    start: int  # absolute byte offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


class SafetensorsFile:
    """One .safetensors file: a validated header and a read-only memory map of the data."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self._handle = open(self.path, "rb")
        except OSError as error:
            raise AssistantError(f"{self.path}: cannot open ({error.strerror})") from None
        self.size = self.path.stat().st_size
        self.entries = self._read_header()
        self._map = mmap.mmap(self._handle.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None

    def _read_header(self) -> dict[str, TensorEntry]:
        head = self._handle.read(8)
        if len(head) < 8:
            raise AssistantError(f"{self.path}: not a safetensors file (only {self.size} bytes)")
        (header_len,) = struct.unpack("<Q", head)
        if header_len < 2 or header_len > MAX_HEADER_BYTES:
            raise AssistantError(f"{self.path}: not a safetensors file (header length {header_len} is implausible)")
        if 8 + header_len > self.size:
            raise AssistantError(
                f"{self.path}: truncated or not a safetensors file (header needs {header_len} bytes, file has {self.size - 8})"
            )
        raw = self._handle.read(header_len)
        if not raw.lstrip().startswith(b"{"):
            raise AssistantError(f"{self.path}: not a safetensors file (header is not a JSON object)")
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise AssistantError(f"{self.path}: malformed safetensors header ({error})") from None
        if not isinstance(header, dict):
            raise AssistantError(f"{self.path}: malformed safetensors header (not a JSON object)")
        data_start = self.data_start = 8 + header_len
        entries = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            entries[name] = self._entry(name, info, data_start)
        data_end = max((entry.end for entry in entries.values()), default=data_start)
        if data_end > self.size:
            raise AssistantError(f"{self.path}: truncated (data needs {data_end} bytes, file has {self.size})")
        self._refuse_overlaps(entries.values())
        return entries

    def _refuse_overlaps(self, entries) -> None:
        """Two tensors sharing bytes would convert to weights nobody trained (and a writer never does it)."""
        previous = None
        for entry in sorted((e for e in entries if e.nbytes), key=lambda e: (e.start, e.end)):
            if previous is not None and entry.start < previous.end:
                raise AssistantError(
                    f"{self.path}: malformed safetensors header: tensors {previous.name!r} and {entry.name!r} "
                    f"overlap (data_offsets {previous.start - self.data_start}-{previous.end - self.data_start} "
                    f"and {entry.start - self.data_start}-{entry.end - self.data_start})")
            previous = entry

    def _entry(self, name: str, info, data_start: int) -> TensorEntry:
        def bad(problem: str) -> AssistantError:
            return AssistantError(f"{self.path}: malformed safetensors header: tensor {name!r} {problem}")

        if not isinstance(info, dict):
            raise bad("is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in KNOWN_DTYPES:
            raise bad(f"has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise bad(f"has invalid shape {shape!r}")
        if (
            not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(n, int) for n in offsets) or not 0 <= offsets[0] <= offsets[1]
        ):
            raise bad(f"has invalid data_offsets {offsets!r}")
        elements = math.prod(shape)  # exact: numpy's int64 product would wrap around silently
        if elements > MAX_ELEMENTS:
            raise bad(f"has shape {shape}: {elements} elements is more than any file can hold")
        expected = elements * KNOWN_DTYPES[dtype]
        if offsets[1] - offsets[0] != expected:
            raise bad(f"has {offsets[1] - offsets[0]} bytes of data, its shape {shape} and dtype {dtype} need {expected}")
        return TensorEntry(name, dtype, tuple(shape), self, data_start + offsets[0], data_start + offsets[1])

    def array(self, entry: TensorEntry) -> np.ndarray:
        """The tensor's data as a read-only array over the memory map (BF16 is viewed as raw uint16)."""
        if entry.dtype not in SUPPORTED_DTYPES:
            supported = ", ".join(SUPPORTED_DTYPES)
            raise AssistantError(
                f"{self.path}: tensor {entry.name!r} has unsupported dtype {entry.dtype} (supported: {supported})"
            )
        dtype = np.dtype(SUPPORTED_DTYPES[entry.dtype]).newbyteorder("<")
        count = entry.nbytes // dtype.itemsize
        if count == 0:
            return np.zeros(entry.shape, dtype)
        return np.frombuffer(self._map, dtype, count, entry.start).reshape(entry.shape)

    def release(self, entry: TensorEntry) -> None:
        """Drop the tensor's pages from this process, so peak memory stays near one tensor, not the file."""
        if self._map is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        start = entry.start - entry.start % page
        length = entry.end - start
        if length > 0:
            self._map.madvise(mmap.MADV_DONTNEED, start, length)

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # an array still views the map; the OS frees it with the process
                pass
        self._handle.close()


def read_tensors(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    """Every tensor of one file as (dtype name, read-only array over the memory map)."""
    file = SafetensorsFile(path)
    return {name: (entry.dtype, file.array(entry)) for name, entry in file.entries.items()}


def write_safetensors(path: Path, specs: list[tuple[str, str, tuple[int, ...]]], arrays) -> None:
    """Write tensors in ``specs`` order (name, dtype, shape); ``arrays`` yields their data in that order.

    The header is fixed before any data is produced, so tensors are made and written one at a time; the file
    appears under its name only when complete."""
    path = Path(path)
    header, offset = {}, 0
    for name, dtype, shape in specs:
        nbytes = int(np.prod(shape, dtype=np.int64)) * KNOWN_DTYPES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    partial = path.with_name(path.name + ".part")
    with open(partial, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for (name, dtype, shape), array in zip(specs, arrays, strict=True):
            expected = np.dtype(SUPPORTED_DTYPES[dtype])
            if tuple(array.shape) != tuple(shape) or array.dtype != expected:
                raise AssertionError(f"{name}: made {array.dtype}{array.shape}, declared {dtype}{shape}")
            f.write(np.ascontiguousarray(array).tobytes())
    partial.replace(path)
