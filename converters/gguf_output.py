"""The GGUF files one conversion or import writes side by side: each as ``NAME.TYPE.gguf.part``, renamed only
when every one is complete, and removed on any failure, so a user never finds a partial model file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

from assistant.errors import AssistantError
from converters import encodings, output_projection
from converters.progress import Progress


@dataclass
class OutputFile:
    path: Path
    weight_type: str
    writer: gguf.GGUFWriter | None = None
    types: dict[str, Q] = field(default_factory=dict)  # tensor name -> its GGML type in this file

    @property
    def part(self) -> Path:
        return self.path.with_name(self.path.name + ".part")

    def start(self, architecture: str, name: str, projection: Q | None = None) -> gguf.GGUFWriter:
        """A writer with the keys every file of ours carries first; an MXFP4 copy's ``projection`` (the type of
        its output projection) is recorded among them, where `models list` finds it without reading further."""
        writer = self.writer = gguf.GGUFWriter(self.part, architecture)
        writer.add_name(name)
        writer.add_file_type(encodings.FILE_TYPES[self.weight_type])
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        if projection is not None and self.weight_type == "mxfp4":
            output_projection.record(writer, projection)
        return writer

    def add_tensor_info(self, name: str, shape: tuple[int, ...], qtype: Q) -> None:
        self.types[name] = qtype
        byte_shape = encodings.byte_shape(shape, qtype)
        self.writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=qtype)

    def write_header(self) -> None:
        self.writer.write_header_to_file()
        self.writer.write_kv_data_to_file()
        self.writer.write_ti_data_to_file()

    def discard(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:
                pass
        self.part.unlink(missing_ok=True)


def requested_types(types, mxfp4_output: str) -> tuple[str, ...]:
    """The output types asked for, each once, in order; an unknown one (or an unknown type for the MXFP4
    copy's output projection) is an error naming the choices."""
    types = tuple(dict.fromkeys(types))
    for kind in types:
        if kind not in encodings.WEIGHT_TYPES:
            raise AssistantError(f"unknown output type {kind!r} (choose from {', '.join(encodings.WEIGHT_TYPES)})")
    if mxfp4_output not in output_projection.CHOICES:
        raise AssistantError(f"unknown type {mxfp4_output!r} for the MXFP4 copy's output projection "
                             f"(choose from {', '.join(output_projection.CHOICES)})")
    if not types:
        raise AssistantError("no output type requested")
    return types


def output_files(outdir: Path, name: str, types, force: bool) -> list[OutputFile]:
    """One file per type in ``outdir``; an existing one is an error unless ``force``."""
    outputs = [OutputFile(outdir / f"{name}.{kind}.gguf", kind) for kind in types]
    if not force:
        for output in outputs:
            if output.path.exists():
                raise AssistantError(f"{output.path}: already exists (use --force to overwrite)")
    outdir.mkdir(parents=True, exist_ok=True)
    return outputs


@contextmanager
def writing(outputs: list[OutputFile], bar: Progress) -> Iterator[None]:
    """Around the writes: on success close and rename every file; on failure remove every part, and say which
    file could not be written (a full disk is the usual cause)."""
    try:
        yield
        for output in outputs:
            output.writer.close()
            output.writer = None
        for output in outputs:
            os.replace(output.part, output.path)
    except OSError as error:
        for output in outputs:
            output.discard()
        target = error.filename or next((o.part for o in outputs), "output")
        reason = error.strerror or f"the disk is full or a file size limit was reached: {error}"
        raise AssistantError(f"{target}: cannot write ({reason})") from None
    except BaseException:
        for output in outputs:
            output.discard()
        raise
    finally:
        bar.finish()
