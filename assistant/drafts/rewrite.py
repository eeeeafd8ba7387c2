"""A draft's GGUF written from its source's: every metadata key and tensor copied as stored (any tensor type:
BF16, MXFP4, Q8_0, K-quants... never re-encoded), except what one method changes. Each method is a module of
its own (blocks.py, pruning.py, vocabulary.py) and says here what it changes."""

from __future__ import annotations

from pathlib import Path

import gguf

from converters.gguf_import import _metadata, _open, _string
from converters.gguf_output import OutputFile, writing
from converters.progress import Progress

# Keys gguf_import._metadata leaves for each output to set, which a copy takes from its source unchanged.
SOURCE_SCALARS = (gguf.Keys.General.FILE_TYPE, gguf.Keys.General.QUANTIZATION_VERSION)


def open_source(path: Path) -> gguf.GGUFReader:
    """``path`` read by gguf-py, or one line naming the file and what is wrong with it."""
    return _open(Path(path))


def source_string(reader: gguf.GGUFReader, key: str) -> str | None:
    return _string(reader, key)


def rewritten(source: Path, destination: Path, name_suffix: str, metadata=None, tensor=None,
              reader: gguf.GGUFReader | None = None) -> Path:
    """Write ``destination`` from the GGUF ``source`` (a temporary name, renamed when whole).

    ``metadata(items)`` returns the keys to write from the source's, each (key, value, value type, element type),
    strings as raw bytes; ``tensor(info)`` returns (name, data) to write for a source tensor, or None to leave
    it out, data as gguf-py holds it (numpy order; uint8 rows of bytes for types numpy lacks); ``name_suffix``
    is added to the model's name. Either left out keeps the source's."""
    source, destination = Path(source), Path(destination)
    reader = reader or _open(source)
    architecture = _string(reader, gguf.Keys.General.ARCHITECTURE) or ""
    items = _metadata(reader, source)
    items = metadata(items) if metadata else items
    name = (_string(reader, gguf.Keys.General.NAME) or source.name.removesuffix(".gguf")) + name_suffix
    output = OutputFile(destination, "draft")
    with writing([output], Progress(f"writing {destination.name}", 0, enabled=False)):
        writer = output.writer = gguf.GGUFWriter(output.part, architecture)
        writer.add_name(name)
        for key in SOURCE_SCALARS:
            if key in reader.fields:
                writer.add_key_value(key, reader.fields[key].contents(), reader.fields[key].types[0])
        if gguf.Keys.General.ALIGNMENT in reader.fields:  # also where the writer puts each tensor's data
            writer.add_custom_alignment(int(reader.fields[gguf.Keys.General.ALIGNMENT].contents()))
        for key, value, value_type, element_type in items:
            writer.add_key_value(key, value, value_type, element_type)
        for info in reader.tensors:
            written = (info.name, info.data) if tensor is None else tensor(info)
            if written is not None:
                # gguf-py takes the byte shape of a type numpy lacks and turns it back into element counts itself
                new_name, data = written
                writer.add_tensor(new_name, data, raw_shape=data.shape, raw_dtype=info.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    return destination
