"""Phi-3, Phi-3.5 and Phi-4-mini (Phi3ForCausalLM).

The checkpoint's fused projections stay fused, as llama.cpp's phi3 graph reads them: `qkv_proj` is one
attention QKV matrix (q rows, then k, then v) and `gate_up_proj` one feed-forward up matrix of twice the
intermediate size whose first half is the gate. Rope is NEOX-style and may rotate only part of each head
(Phi-4-mini); LongRoPE (Phi-3.5, Phi-4-mini) brings short and long per-frequency factors, which llama.cpp
picks by context size, and an attention factor.

llama.cpp runs Phi-3 without the sliding window some configs declare (`sliding_window`), so answers past
that window can differ from transformers'.
"""

from __future__ import annotations

import gguf

from assistant.errors import AssistantError
from converters.architectures.base import Architecture

T = gguf.MODEL_TENSOR


class Phi3(Architecture):
    gguf_arch = gguf.MODEL_ARCH.PHI3
    rope_scalings = ("longrope",)
    partial_rotary = True

    @classmethod
    def read_extras(cls, config, config_path, common):
        if common["heads"] * common["head_dim"] != common["hidden"]:
            raise AssistantError(f"{config_path}: llama.cpp's phi3 needs num_attention_heads x head_dim = hidden_size")
        return {}

    def shapes(self):
        h, kv, ff = self.hidden, self.kv_heads * self.head_dim, self.intermediate
        return {**super().shapes(), T.ATTN_QKV: (h + 2 * kv, h), T.FFN_UP: (2 * ff, h)}

    def layer_tensors(self):
        kinds = (T.ATTN_NORM, T.ATTN_QKV, T.ATTN_OUT, T.FFN_NORM, T.FFN_UP, T.FFN_DOWN)
        return [(kind, "weight") for kind in kinds]


ARCHITECTURES = {"Phi3ForCausalLM": Phi3}
