"""Qwen2 / 2.5 (and their Coder models) and Qwen3: the Llama block with NEOX rope (no row reordering);
Qwen2 adds q/k/v biases, Qwen3 drops them for per-head RMSNorm on q and k."""

from __future__ import annotations

import gguf

from converters.architectures.base import LLAMA_BLOCK, Architecture

T = gguf.MODEL_TENSOR


class Qwen2(Architecture):
    gguf_arch = gguf.MODEL_ARCH.QWEN2
    biases = frozenset({T.ATTN_Q, T.ATTN_K, T.ATTN_V})


class Qwen3(Architecture):
    gguf_arch = gguf.MODEL_ARCH.QWEN3

    def shapes(self):
        return {**super().shapes(), T.ATTN_Q_NORM: (self.head_dim,), T.ATTN_K_NORM: (self.head_dim,)}

    def layer_tensors(self):
        return [(kind, "weight") for kind in LLAMA_BLOCK + (T.ATTN_Q_NORM, T.ATTN_K_NORM)]


ARCHITECTURES = {"Qwen2ForCausalLM": Qwen2, "Qwen3ForCausalLM": Qwen3}
