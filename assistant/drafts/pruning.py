"""A draft made by zeroing weights of the target's block matrices, by magnitude within each row: unstructured
(the smaller half of every row) or 4:8 (the 4 smaller of every 8 neighbours). Without sparse kernels a CPU
multiplies the zeros all the same, so such a draft costs what the target costs: it is measured and reported so
that the table shows it, not assumed. Only 16- and 32-bit matrices are pruned; a quantized file is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T

from assistant.drafts.blocks import BLOCK_TENSOR
from assistant.drafts.rewrite import rewritten
from assistant.errors import AssistantError

PATTERNS = ("50%", "4:8")
GROUP = 8  # the 4:8 pattern's neighbourhood


def pruned(source: Path, pattern: str, destination: Path) -> Path:
    """Write ``destination``: ``source`` with every block matrix pruned to ``pattern`` (one of PATTERNS)."""
    if pattern not in PATTERNS:
        raise AssistantError(f"unknown pruning pattern {pattern!r} (known: {', '.join(PATTERNS)})")

    def tensor(info):
        if BLOCK_TENSOR.fullmatch(info.name) is None or len(info.shape) < 2 or "norm" in info.name:
            return info.name, info.data
        if info.tensor_type not in (T.BF16, T.F16, T.F32):
            raise AssistantError(f"{source}: {info.name} is {info.tensor_type.name}; pruning needs 16- or 32-bit "
                                 "weights (a BF16 or F16 target)")
        return info.name, _pruned_rows(info.data, info.tensor_type, pattern)

    return rewritten(source, destination, f" (pruned {pattern})", tensor=tensor)


def _pruned_rows(data: np.ndarray, tensor_type, pattern: str) -> np.ndarray:
    """``data`` as stored (BF16 as rows of bytes) with the chosen weights of each row set to zero."""
    if tensor_type == T.BF16:
        bits = np.ascontiguousarray(data).view(np.uint16)
        values = (bits.astype(np.uint32) << 16).view(np.float32)
    else:
        bits, values = None, data.astype(np.float32)
    rows = values.reshape(-1, values.shape[-1])
    if pattern == "50%" or rows.shape[1] % GROUP:
        groups = rows.reshape(rows.shape[0], 1, -1)
    else:
        groups = rows.reshape(rows.shape[0], -1, GROUP)
    half = groups.shape[2] // 2
    smaller = np.argpartition(np.abs(groups), half - 1, axis=2)[:, :, :half]
    keep = np.ones(groups.shape, dtype=bool)
    np.put_along_axis(keep, smaller, False, axis=2)
    keep = keep.reshape(data.shape[:-1] + (-1,))
    if bits is not None:
        return np.where(keep, bits, np.uint16(0)).view(np.uint8).reshape(data.shape)
    return np.where(keep, data, data.dtype.type(0))
