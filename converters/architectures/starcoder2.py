"""StarCoder2 (Starcoder2ForCausalLM): LayerNorm with biases instead of RMSNorm, a GELU feed-forward of
two matrices (`c_fc` up, `c_proj` down) instead of SwiGLU, biases on every projection, NEOX rope.

llama.cpp's starcoder2 graph requires the norm, output and feed-forward biases (`use_bias: true`, as every
released StarCoder2 has) and runs without the config's sliding window.
"""

from __future__ import annotations

import gguf

from assistant.errors import AssistantError
from converters.architectures.base import Architecture

T = gguf.MODEL_TENSOR
BLOCK = (T.ATTN_NORM, T.ATTN_Q, T.ATTN_K, T.ATTN_V, T.ATTN_OUT, T.FFN_NORM, T.FFN_UP, T.FFN_DOWN)
REQUIRED_BIASES = (T.ATTN_NORM, T.ATTN_OUT, T.FFN_NORM, T.FFN_UP, T.FFN_DOWN)


class StarCoder2(Architecture):
    gguf_arch = gguf.MODEL_ARCH.STARCODER2
    tied_by_default = True
    norm_eps_key = "norm_epsilon"
    layer_norm = True
    biases = frozenset(BLOCK + (T.OUTPUT_NORM,))

    @classmethod
    def read_extras(cls, config, config_path, common):
        if common["heads"] * common["head_dim"] != common["hidden"]:
            raise AssistantError(f"{config_path}: llama.cpp's starcoder2 needs num_attention_heads x head_dim = hidden_size")
        if config.get("use_bias") is False:
            raise AssistantError(f"{config_path}: use_bias false is not supported (llama.cpp's starcoder2 needs the biases)")
        return {}

    def layer_tensors(self):
        return [(kind, "weight") for kind in BLOCK] + [(kind, "bias") for kind in REQUIRED_BIASES]

    def global_tensors(self):
        return super().global_tensors() + [(T.OUTPUT_NORM, "bias")]


ARCHITECTURES = {"Starcoder2ForCausalLM": StarCoder2}
