"""A draft made from the target's GGUF by dropping transformer blocks; everything else is the target's, byte for byte.

Such a draft shares the target's vocabulary, embeddings and most of its blocks, so it agrees with the target
often and costs nothing to train. Tensors are copied as stored, whatever their type (BF16, MXFP4, Q8_0,
K-quants...): only ``blk.N`` names, ``{arch}.block_count`` and per-layer metadata arrays change.
"""

from __future__ import annotations

import re
from pathlib import Path

import gguf
from gguf import GGUFValueType as V

from assistant.drafts.rewrite import open_source, rewritten, source_string
from assistant.errors import AssistantError

BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.(.+)")


def block_count(source: Path) -> int:
    """How many transformer blocks ``source`` declares (its ``{arch}.block_count``)."""
    source = Path(source)
    return _architecture_and_blocks(open_source(source), source)[1]


def without_blocks(source: Path, dropped: set[int] | frozenset[int], destination: Path) -> Path:
    """Write ``destination``: the GGUF ``source`` with the blocks ``dropped`` removed and the rest renumbered in
    order (blk.5 becomes blk.4 when blk.2 is dropped). Block indices are the file's own (``blk.0`` is block 0)."""
    source, destination = Path(source), Path(destination)
    dropped = {int(index) for index in dropped}
    reader = open_source(source)
    architecture, count = _architecture_and_blocks(reader, source)
    renumbered = _renumbering(count, dropped, source)

    def tensor(info):
        new_name = _renamed(info.name, renumbered, count, source)
        return None if new_name is None else (new_name, info.data)

    return rewritten(source, destination, _name_suffix(dropped),
                     lambda items: _kept_metadata(items, architecture, count, renumbered), tensor, reader)


def _architecture_and_blocks(reader: gguf.GGUFReader, path: Path) -> tuple[str, int]:
    architecture = source_string(reader, gguf.Keys.General.ARCHITECTURE)
    if not architecture:
        raise AssistantError(f"{path}: the GGUF file names no architecture (general.architecture)")
    field = reader.fields.get(gguf.Keys.LLM.BLOCK_COUNT.format(arch=architecture))
    if field is None or field.types[0] in (V.ARRAY, V.STRING):
        raise AssistantError(f"{path}: no {architecture}.block_count, so there are no transformer blocks to drop")
    return architecture, int(field.contents())


def _renumbering(count: int, dropped: set[int], path: Path) -> dict[int, int]:
    """Each kept block's index in the source -> its index in the draft, in order."""
    outside = sorted(index for index in dropped if not 0 <= index < count)
    if outside:
        raise AssistantError(f"{path}: no block {outside[0]} to drop (the file has {count} blocks, 0-{count - 1})")
    kept = [index for index in range(count) if index not in dropped]
    if not kept:
        raise AssistantError(f"{path}: dropping all {count} blocks would leave no model")
    return {old: new for new, old in enumerate(kept)}


def _kept_metadata(source_items, architecture, count, renumbered) -> list[tuple[str, object, V, V | None]]:
    """The source's keys with the new block count and per-layer arrays cut to the kept blocks. Only the
    architecture's own keys are per-layer: a ``general.tags`` list that happens to be as long stays whole."""
    count_key = gguf.Keys.LLM.BLOCK_COUNT.format(arch=architecture)
    items = []
    for key, value, value_type, element_type in source_items:
        if key == count_key:
            value = len(renumbered)
        elif value_type == V.ARRAY and key.startswith(f"{architecture}.") and len(value) == count:
            value = [value[old] for old in renumbered]
        items.append((key, value, value_type, element_type))
    return items


def _renamed(name: str, renumbered: dict[int, int], count: int, path: Path) -> str | None:
    """The tensor's name in the draft, or None for a tensor of a dropped block."""
    match = BLOCK_TENSOR.fullmatch(name)
    if match is None:
        return name
    index = int(match[1])
    if index >= count:
        raise AssistantError(f"{path}: tensor {name} belongs to block {index}, beyond the file's {count} blocks")
    return f"blk.{renumbered[index]}.{match[2]}" if index in renumbered else None


def _name_suffix(dropped: set[int]) -> str:
    """' (blocks 2, 14-17 dropped)': runs of consecutive indices as ranges; nothing when none is dropped."""
    if not dropped:
        return ""
    runs: list[list[int]] = []
    for index in sorted(dropped):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    text = ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
    return f" ({'block' if len(dropped) == 1 else 'blocks'} {text} dropped)"
