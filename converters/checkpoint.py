"""Locate a Hugging Face checkpoint from what the user points at: a .safetensors file or a directory.

A file brings its directory with it (config.json, tokenizer files, and the shard index when there is one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from assistant.errors import AssistantError
from converters.safetensors_file import SafetensorsFile, TensorEntry
from converters.side_files import check_tokenizer_files, read_config, read_json

INDEX_NAME = "model.safetensors.index.json"


@dataclass
class Checkpoint:
    directory: Path
    config: dict
    tensors: dict[str, TensorEntry]
    files: list[SafetensorsFile] = field(default_factory=list)

    def close(self) -> None:
        for file in self.files:
            file.close()


def _weight_files(source: Path) -> list[Path]:
    directory = source if source.is_dir() else source.parent
    index = directory / INDEX_NAME
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise AssistantError(f"{index}: has no weight_map")
        files = sorted({directory / name for name in weight_map.values()})
        for file in files:
            if not file.is_file():
                raise AssistantError(f"{file}: missing (listed in {index.name})")
        return files
    if source.is_file():
        return [source]
    files = sorted(source.glob("*.safetensors"))
    if not files:
        raise AssistantError(f"{source}: no .safetensors files in this directory")
    return files


def open_checkpoint(source: str | Path) -> Checkpoint:
    """Validate every header, the config and the tokenizer files before anything is written."""
    source = Path(source).expanduser()
    if not source.exists():
        raise AssistantError(f"{source}: no such file or directory")
    if source.is_file() and source.suffix != ".safetensors":
        raise AssistantError(f"{source}: not a .safetensors file")
    directory = source if source.is_dir() else source.parent
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise AssistantError(f"{config_path}: missing (the model's config.json must sit beside its weights)")
    config = read_config(config_path)
    check_tokenizer_files(directory)
    checkpoint = Checkpoint(directory, config, {})
    try:
        for path in _weight_files(source):
            file = SafetensorsFile(path)
            checkpoint.files.append(file)
            for name, entry in file.entries.items():
                if name in checkpoint.tensors:
                    raise AssistantError(f"{path}: tensor {name!r} also appears in {checkpoint.tensors[name].file.path}")
                checkpoint.tensors[name] = entry
    except BaseException:
        checkpoint.close()
        raise
    return checkpoint
