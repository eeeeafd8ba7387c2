"""Gemma (CodeGemma), Gemma 2 and Gemma 3 (Gemma3ForCausalLM, and the text model of the multimodal
Gemma3ForConditionalGeneration).

All three scale embeddings by sqrt(hidden) and use GELU feed-forwards inside llama.cpp's graphs; what a
checkpoint must bring: RMSNorm weights stored as an offset from 1 (Hugging Face multiplies by 1 + w, so
1 is added here), tied embeddings for Gemma and Gemma 2. Gemma 2 adds post-attention and post-FFN norms,
logit soft-capping and sliding-window layers; Gemma 3 replaces attention soft-capping by q/k norms and
gives its sliding-window layers their own rope base.

llama.cpp fixes the attention scale by model size (1/sqrt(head_dim), or 1/sqrt(hidden/heads) for the
27B shapes); a config whose `query_pre_attn_scalar` says otherwise is refused rather than converted wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import gguf

from assistant.errors import AssistantError
from converters.architectures.base import Architecture

T = gguf.MODEL_TENSOR
# transformers' Gemma 2 / 3 config defaults
DEFAULT_QUERY_SCALAR = 256
DEFAULT_WINDOW = 4096


class Gemma(Architecture):
    gguf_arch = gguf.MODEL_ARCH.GEMMA
    tied_by_default = True
    norm_offset = 1.0
    rope_scalings = ()
    default_head_dim = 256

    @classmethod
    def read_extras(cls, config, config_path, common):
        if not common["tied"] and T.OUTPUT not in gguf.MODEL_TENSORS[cls.gguf_arch]:
            raise AssistantError(f"{config_path}: llama.cpp's {gguf.MODEL_ARCH_NAMES[cls.gguf_arch]} ties the output "
                                 "head to the embeddings; tie_word_embeddings false is not supported")
        return {}


def _sliding_layers(config: dict, layers: int, default_period: int, config_path) -> tuple[bool, ...]:
    """Which layers attend within the sliding window: `layer_types` where given, else every layer but
    each `sliding_window_pattern`-th (transformers' rule for configs that predate `layer_types`)."""
    types = config.get("layer_types")
    if types is not None:
        if len(types) != layers or not set(types) <= {"sliding_attention", "full_attention"}:
            raise AssistantError(f"{config_path}: layer_types must name sliding_attention or full_attention "
                                 f"for each of the {layers} layers")
        return tuple(kind == "sliding_attention" for kind in types)
    period = config.get("sliding_window_pattern") or default_period
    return tuple((layer + 1) % period != 0 for layer in range(layers))


@dataclass(frozen=True, kw_only=True)
class Gemma2(Gemma):
    gguf_arch = gguf.MODEL_ARCH.GEMMA2
    rope_scalings = ("linear",)
    default_period: ClassVar[int] = 2
    large_layers: ClassVar[int] = 46  # llama.cpp's 27B shape, which scales attention by hidden/heads
    default_softcaps: ClassVar[tuple[float | None, float | None]] = (50.0, 30.0)  # attention, final
    attn_softcap: float | None = None
    final_softcap: float | None = None
    sliding_window: int | None = None
    sliding_layers: tuple[bool, ...] = ()

    @classmethod
    def read_extras(cls, config, config_path, common):
        super().read_extras(config, config_path, common)
        uses = common["hidden"] // common["heads"] if common["layers"] == cls.large_layers else common["head_dim"]
        scalar = config.get("query_pre_attn_scalar") or DEFAULT_QUERY_SCALAR
        if scalar != uses:
            raise AssistantError(f"{config_path}: query_pre_attn_scalar {scalar} differs from the {uses} llama.cpp's "
                                 f"{gguf.MODEL_ARCH_NAMES[cls.gguf_arch]} uses for this shape")
        window = config.get("sliding_window", DEFAULT_WINDOW)
        attn_softcap, final_softcap = cls.default_softcaps
        return {
            "attn_softcap": config.get("attn_logit_softcapping", attn_softcap),
            "final_softcap": config.get("final_logit_softcapping", final_softcap),
            "sliding_window": window,
            # no window: no sliding layers (llama.cpp's gemma2 would otherwise assume a 4096-token window)
            "sliding_layers": (_sliding_layers(config, common["layers"], cls.default_period, config_path) if window
                               else (False,) * common["layers"]),
        }

    def add_hyperparameters(self, writer):
        tensors = super().add_hyperparameters(writer)
        if self.attn_softcap:
            writer.add_attn_logit_softcapping(self.attn_softcap)
        if self.final_softcap:
            writer.add_final_logit_softcapping(self.final_softcap)
        if self.sliding_window:
            writer.add_sliding_window(self.sliding_window)
        writer.add_sliding_window_pattern(list(self.sliding_layers))
        return tensors

    def shapes(self):
        h = self.hidden
        return {**super().shapes(), T.ATTN_POST_NORM: (h,), T.FFN_PRE_NORM: (h,), T.FFN_POST_NORM: (h,)}

    def layer_tensors(self):
        kinds = (T.ATTN_NORM, T.ATTN_Q, T.ATTN_K, T.ATTN_V, T.ATTN_OUT, T.ATTN_POST_NORM, T.FFN_PRE_NORM,
                 T.FFN_GATE, T.FFN_UP, T.FFN_DOWN, T.FFN_POST_NORM)
        return [(kind, "weight") for kind in kinds]


class Gemma3(Gemma2):
    gguf_arch = gguf.MODEL_ARCH.GEMMA3
    default_period = 6
    large_layers = 62
    default_softcaps = (None, None)
    default_rope_theta = 1_000_000.0

    @classmethod
    def read_extras(cls, config, config_path, common):
        if config.get("attn_logit_softcapping"):
            raise AssistantError(f"{config_path}: attn_logit_softcapping is not part of llama.cpp's gemma3")
        return super().read_extras(config, config_path, common)

    def shapes(self):
        return {**super().shapes(), T.ATTN_Q_NORM: (self.head_dim,), T.ATTN_K_NORM: (self.head_dim,)}

    def layer_tensors(self):
        return super().layer_tensors() + [(T.ATTN_Q_NORM, "weight"), (T.ATTN_K_NORM, "weight")]


# Gemma3TextConfig's defaults: the text_config of the multimodal checkpoints (4B, 12B, 27B) leaves them out
TEXT_DEFAULTS = {"num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 262208,
                 "max_position_embeddings": 131072}
LANGUAGE_PREFIXES = {"language_model.model.": "model.", "model.language_model.": "model.",
                     "language_model.lm_head.": "lm_head."}
VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


@dataclass(frozen=True, kw_only=True)
class Gemma3Multimodal(Gemma3):
    """Gemma3ForConditionalGeneration converted as its text model: the vision tower and projector are left
    out (llama.cpp runs them from a separate mmproj file), the language model's tensors keep their weights."""

    @classmethod
    def from_config(cls, hf_name, config, config_path):
        text = config.get("text_config")
        if not isinstance(text, dict):
            raise AssistantError(f"{config_path}: {hf_name} needs a text_config object")
        tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings", True))
        merged = {**TEXT_DEFAULTS, **text, "architectures": [hf_name], "tie_word_embeddings": tied}
        return super().from_config(hf_name, merged, config_path)

    def ignored(self, hf_name):
        return hf_name.startswith(VISION_PREFIXES) or super().ignored(hf_name)

    def text_model_name(self, hf_name):
        for prefix, replacement in LANGUAGE_PREFIXES.items():
            if hf_name.startswith(prefix):
                return replacement + hf_name[len(prefix):]
        return hf_name


ARCHITECTURES = {"GemmaForCausalLM": Gemma, "Gemma2ForCausalLM": Gemma2, "Gemma3ForCausalLM": Gemma3,
                 "Gemma3ForConditionalGeneration": Gemma3Multimodal}
