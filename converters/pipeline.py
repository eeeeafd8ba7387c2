"""`convert`: one pass over a Hugging Face checkpoint writing every requested GGUF file side by side.

Every tensor is read once from the memory map, encoded for each output and released, so peak memory is a
small multiple of the largest tensor. Outputs are written as ``*.part`` and renamed only when all are done.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

from assistant import home
from assistant.errors import AssistantError
from converters import architectures, encodings, output_projection
from converters.checkpoint import Checkpoint, open_checkpoint
from converters.gguf_output import output_files, requested_types, writing
from converters.side_files import check_tokenizer_files, read_config
from converters.progress import Progress
from converters.safetensors_file import SUPPORTED_DTYPES, TensorEntry
from converters.vocab import add_vocabulary

FALLBACK = Q.BF16  # for 2-D weights whose rows are not a multiple of the 32-value block


@dataclass
class PlannedTensor:
    gguf_name: str
    kind: gguf.MODEL_TENSOR
    entry: TensorEntry | None  # None: generated (rope frequency factors)
    data: np.ndarray | None = None
    is_bias: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        return self.entry.shape if self.entry is not None else self.data.shape


def _plan(checkpoint: Checkpoint, arch: architectures.Architecture, generated) -> list[PlannedTensor]:
    """Map, check and order every tensor before anything is written."""
    name_map = gguf.get_tensor_name_map(arch.gguf_arch, arch.layers)
    planned: dict[str, PlannedTensor] = {}
    T = gguf.MODEL_TENSOR
    for hf_name, entry in checkpoint.tensors.items():
        where = entry.file.path
        if arch.ignored(hf_name):
            continue
        found = name_map.get_type_and_name(arch.text_model_name(hf_name), try_suffixes=(".weight", ".bias"))
        if found is None:
            raise AssistantError(f"{where}: tensor {hf_name!r} has no GGUF name for {arch.hf_name}")
        kind, gguf_name = found
        if kind == T.OUTPUT and arch.tied:
            continue  # tied: llama.cpp reads the head from token_embd
        is_bias = gguf_name.endswith(".bias")
        if is_bias and not arch.bias_allowed(kind):
            raise AssistantError(f"{where}: tensor {hf_name!r}: llama.cpp's {arch.gguf_name} has no such bias")
        expected = arch.expected_shape(kind, is_bias)
        if expected is None:
            raise AssistantError(f"{where}: tensor {hf_name!r} ({kind.name}) is not part of a {arch.hf_name}")
        if entry.shape != expected:
            raise AssistantError(
                f"{where}: tensor {hf_name!r} has shape {list(entry.shape)}, config.json implies {list(expected)}"
            )
        if entry.dtype not in SUPPORTED_DTYPES:
            raise AssistantError(
                f"{where}: tensor {hf_name!r} has unsupported dtype {entry.dtype} (supported: {', '.join(SUPPORTED_DTYPES)})"
            )
        planned[gguf_name] = PlannedTensor(gguf_name, kind, entry, is_bias=is_bias)

    for name in arch.required_names():
        if name not in planned:
            raise AssistantError(f"{checkpoint.directory}: checkpoint lacks the {name} tensor a {arch.hf_name} needs")
    extra = [PlannedTensor(gguf.TENSOR_NAMES[kind] + ".weight", kind, None, values) for kind, values in generated]
    return extra + list(planned.values())


def _output_type(tensor: PlannedTensor, weight_type: str, mxfp4_output: str) -> Q:
    if len(tensor.shape) == 1:
        return Q.F32
    wanted = encodings.WEIGHT_TYPES[weight_type]
    if weight_type == "mxfp4" and tensor.gguf_name in output_projection.TENSORS:
        wanted = output_projection.wanted_type(mxfp4_output)
    if wanted in encodings.BLOCKED and tensor.shape[-1] % 32:
        return FALLBACK
    return wanted


def _load(tensor: PlannedTensor, arch: architectures.Architecture) -> np.ndarray:
    if tensor.entry is None:
        return tensor.data
    return arch.transform(tensor.kind, tensor.entry.file.array(tensor.entry), tensor.is_bias)


def default_name(source) -> str:
    """The checkpoint directory's name (for a file, the directory it sits in)."""
    path = Path(source).expanduser().resolve()
    return (path if path.is_dir() else path.parent).name


def check_metadata(directory) -> None:
    """Check everything conversion reads besides the weights (the architecture, its hyperparameters, the
    tokenizer), so that `assistant pull` refuses a repository before downloading gigabytes of weights."""
    directory = Path(directory)
    config_path = directory / "config.json"
    arch = architectures.read_architecture(read_config(config_path), config_path)
    check_tokenizer_files(directory)
    probe = gguf.GGUFWriter(None, arch.gguf_name)
    arch.add_hyperparameters(probe)
    add_vocabulary(probe, directory, arch.vocab_size)


def convert(source, outdir=None, name=None, types=("bf16", "mxfp4"), force=False, progress=None,
            mxfp4_output: str = output_projection.DEFAULT) -> dict[str, Path]:
    """Convert a Hugging Face safetensors checkpoint to one GGUF file per type; returns {type: path}.
    ``mxfp4_output``: the type of the MXFP4 copy's output projection and token embeddings."""
    types = requested_types(types, mxfp4_output)
    checkpoint = open_checkpoint(source)
    try:
        config_path = checkpoint.directory / "config.json"
        arch = architectures.read_architecture(checkpoint.config, config_path)
        name = name or default_name(source)
        outdir = Path(outdir).expanduser() if outdir is not None else home.models_dir()
        outputs = output_files(outdir, name, types, force)
        generated = arch.add_hyperparameters(gguf.GGUFWriter(None, arch.gguf_name))
        plan = _plan(checkpoint, arch, generated)
        _write_all(checkpoint, arch, plan, outputs, name, mxfp4_output, progress)
    finally:
        checkpoint.close()
    return {output.weight_type: output.path for output in outputs}


def _write_all(checkpoint, arch, plan, outputs, name, mxfp4_output, progress) -> None:
    total = sum(tensor.entry.nbytes for tensor in plan if tensor.entry is not None)
    bar = Progress(f"converting {name}", total, enabled=progress)
    head = output_projection.projection_tensor(tensor.gguf_name for tensor in plan)
    projection = next(_output_type(t, "mxfp4", mxfp4_output) for t in plan if t.gguf_name == head)
    with writing(outputs, bar):
        for output in outputs:
            writer = output.start(arch.gguf_name, name, projection)
            arch.add_hyperparameters(writer)
            add_vocabulary(writer, checkpoint.directory, arch.vocab_size)
            for tensor in plan:
                output.add_tensor_info(tensor.gguf_name, tensor.shape,
                                       _output_type(tensor, output.weight_type, mxfp4_output))
            output.write_header()
        for tensor in plan:
            array = _load(tensor, arch)
            for output in outputs:
                output.writer.write_tensor_data(encodings.encode(array, output.types[tensor.gguf_name]))
            del array
            if tensor.entry is not None:
                tensor.entry.file.release(tensor.entry)
                bar.advance(tensor.entry.nbytes)
