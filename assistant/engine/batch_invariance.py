"""Whether a target may decode one token a step and still match its verification batches bit for bit.

Speculation verifies a draft's tokens in one batch; the target alone decodes one at a time. The answer is
exactly the target's only if a token's logits have the same bits either way. Our kernels give that for every
batch a verification uses: the matrix products of BF16, MXFP4, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and K-quant
weights (native/src/bf16-gemm.h, mxfp4-gemm.h, q8-gemm.h, kquant-gemm.h) and flash attention over an f16
cache (attention.h). llama.cpp's stock kernels do not: a one-row product and a lone query take other paths
than a batch. So a model whose every weight and attention runs on ours decodes one row a step with flash
attention; any other evaluates two rows a step with the plain attention graph, where stock llama.cpp agrees
with itself for the batches a verification uses (engine/context.py, ``min_batch``; a prompt-sized batch need
not: notes/kernels.md).
"""

from __future__ import annotations

from pathlib import Path

from assistant.engine.backend import kernel_description
from assistant.engine.gguf_header import read_header

# weight type (gguf's name) -> the kernel family that must be ours for it
WEIGHT_KERNELS = {"BF16": "bf16", "MXFP4": "mxfp4", "Q8_0": "q8", "Q4_0": "q8", "Q4_1": "q8", "Q5_0": "q8",
                  "Q5_1": "q8", "Q4_K": "kquant", "Q5_K": "kquant", "Q6_K": "kquant"}
BLOCK = 32  # our kernels take rows of whole 32-value blocks


def kernels_in_use() -> dict[str, str]:
    """{"mxfp4": "amx", "bf16": "amx", "attention": "avx512"} from the loaded CPU backend; {} if not our build."""
    try:
        description = kernel_description()
    except LookupError:
        return {}
    return dict(part.split("=", 1) for part in description.split() if "=" in part)


def weight_types(path: Path) -> frozenset[tuple[str, bool]]:
    """(type name, rows are whole 32-value blocks) of every matrix in the GGUF file."""
    return frozenset((tensor.type_name, tensor.shape[0] % BLOCK == 0)
                     for tensor in read_header(path).tensors if len(tensor.shape) >= 2)


def single_rows_match_batches(path: Path, kernels: dict[str, str] | None = None) -> bool:
    """True where every matrix of the model at ``path`` and its attention run on our kernels."""
    kernels = kernels_in_use() if kernels is None else kernels
    if kernels.get("attention", "stock") == "stock":
        return False
    for type_name, whole_blocks in weight_types(Path(path)):
        family = WEIGHT_KERNELS.get(type_name)
        if family is None or not whole_blocks or kernels.get(family, "stock") == "stock":
            return False
    return True
