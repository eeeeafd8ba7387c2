"""Granite 3.x (GraniteForCausalLM): the Llama block with four multipliers llama.cpp reads as KVs.

Embeddings are multiplied by `embedding_multiplier`, each residual branch by `residual_multiplier`,
attention scores use `attention_multiplier` instead of 1/sqrt(head_dim), and logits are divided by
`logits_scaling`. transformers' defaults are all 1.0, so each is always written (llama.cpp's own default
attention scale is 1/sqrt(head_dim), not 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf

from assistant.errors import AssistantError
from converters.architectures.llama import Llama

MULTIPLIERS = ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling")


@dataclass(frozen=True, kw_only=True)
class Granite(Llama):
    gguf_arch = gguf.MODEL_ARCH.GRANITE
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    attention_multiplier: float = 1.0
    logits_scaling: float = 1.0

    @classmethod
    def read_extras(cls, config, config_path, common):
        values = {}
        for key in MULTIPLIERS:
            value = config.get(key, 1.0)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise AssistantError(f"{config_path}: {key} must be a positive number, got {value!r}")
            values[key] = float(value)
        return values

    def add_hyperparameters(self, writer):
        tensors = super().add_hyperparameters(writer)
        writer.add_embedding_scale(self.embedding_multiplier)
        writer.add_residual_scale(self.residual_multiplier)
        writer.add_attention_scale(self.attention_multiplier)
        writer.add_logit_scale(self.logits_scaling)
        return tensors


ARCHITECTURES = {"GraniteForCausalLM": Granite}
