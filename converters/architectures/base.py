"""What every supported architecture declares, with the Llama block (RMSNorm, GQA attention with rope,
SwiGLU feed-forward) as the default each family module adjusts.

An `Architecture` is the parsed config.json of one checkpoint. Its class says what llama.cpp's graph for
that GGUF architecture reads: hyperparameter KVs, the tensors it requires and their shapes, the biases it
applies, and how a Hugging Face tensor must change on the way (rope row order, norm offsets). Tensor
names themselves always come from gguf-py's TensorNameMap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import gguf
import numpy as np

from assistant.errors import AssistantError
from converters.architectures.rope import Rope, add_rope, read_rope
from converters.encodings import as_float32

T = gguf.MODEL_TENSOR
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
LLAMA_BLOCK = (T.ATTN_NORM, T.ATTN_Q, T.ATTN_K, T.ATTN_V, T.ATTN_OUT, T.FFN_NORM, T.FFN_GATE, T.FFN_UP, T.FFN_DOWN)
NORMS = frozenset({T.ATTN_NORM, T.ATTN_POST_NORM, T.FFN_NORM, T.FFN_PRE_NORM, T.FFN_POST_NORM, T.OUTPUT_NORM,
                   T.ATTN_Q_NORM, T.ATTN_K_NORM})


def positive_int(config: dict, key: str, config_path, default=None) -> int:
    value = config.get(key)
    value = default if value is None else value
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise AssistantError(f"{config_path}: {key} must be a positive integer, got {value!r}")
    return value


def permute_for_rope(rows: np.ndarray, n_head: int) -> np.ndarray:
    """HF stores each head's rotary pairs as (first half, second half); ggml's LLAMA rope wants them
    interleaved. Works on weights (rows, cols) and biases (rows,)."""
    shape = rows.shape
    return rows.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


@dataclass(frozen=True, kw_only=True)
class Architecture:
    hf_name: str
    vocab_size: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    norm_eps: float
    context: int
    rope: Rope
    tied: bool

    gguf_arch: ClassVar[gguf.MODEL_ARCH]
    permute_qk: ClassVar[bool] = False  # ggml's NORM rope (Llama, Granite) pairs adjacent values
    tied_by_default: ClassVar[bool] = False  # what the family's transformers config assumes
    rope_scalings: ClassVar[tuple[str, ...]] = ("linear", "yarn")
    partial_rotary: ClassVar[bool] = False
    biases: ClassVar[frozenset] = frozenset()  # kinds whose bias llama.cpp's graph adds
    norm_eps_key: ClassVar[str] = "rms_norm_eps"
    layer_norm: ClassVar[bool] = False  # LayerNorm (StarCoder2) instead of RMSNorm
    norm_offset: ClassVar[float] = 0.0  # Gemma's RMSNorm multiplies by (1 + weight)
    # transformers' config defaults where config.json leaves a key out
    default_head_dim: ClassVar[int | None] = None  # None: hidden_size / num_attention_heads
    default_rope_theta: ClassVar[float] = 10000.0

    @property
    def gguf_name(self) -> str:
        return gguf.MODEL_ARCH_NAMES[self.gguf_arch]

    @classmethod
    def from_config(cls, hf_name: str, config: dict, config_path) -> Architecture:
        hidden = positive_int(config, "hidden_size", config_path)
        heads = positive_int(config, "num_attention_heads", config_path)
        head_dim = positive_int(config, "head_dim", config_path, cls.default_head_dim or hidden // heads)
        rope = read_rope(config, head_dim, cls.rope_scalings, cls.default_rope_theta, config_path)
        if rope.dims != head_dim and not cls.partial_rotary:
            raise AssistantError(f"{config_path}: llama.cpp's {gguf.MODEL_ARCH_NAMES[cls.gguf_arch]} rotates whole "
                                 f"heads, the config rotates {rope.dims} of {head_dim} values")
        common = dict(
            hf_name=hf_name, vocab_size=positive_int(config, "vocab_size", config_path), hidden=hidden,
            layers=positive_int(config, "num_hidden_layers", config_path), heads=heads,
            kv_heads=positive_int(config, "num_key_value_heads", config_path, heads),
            head_dim=head_dim, intermediate=positive_int(config, "intermediate_size", config_path),
            norm_eps=float(config.get(cls.norm_eps_key, 1e-6)),
            context=int(config.get("max_position_embeddings", 4096)), rope=rope,
            tied=bool(config.get("tie_word_embeddings", cls.tied_by_default)),
        )
        return cls(**common, **cls.read_extras(config, config_path, common))

    @classmethod
    def read_extras(cls, config: dict, config_path, common: dict) -> dict:
        """The family's own fields, checked against what llama.cpp's graph can express."""
        return {}

    def add_hyperparameters(self, writer: gguf.GGUFWriter) -> list[tuple[gguf.MODEL_TENSOR, np.ndarray]]:
        """Write the model's KV metadata; returns the tensors it implies (rope frequency factors)."""
        writer.add_context_length(self.context)
        writer.add_embedding_length(self.hidden)
        writer.add_block_count(self.layers)
        writer.add_feed_forward_length(self.intermediate)
        writer.add_head_count(self.heads)
        writer.add_head_count_kv(self.kv_heads)
        if self.layer_norm:
            writer.add_layer_norm_eps(self.norm_eps)
        else:
            writer.add_layer_norm_rms_eps(self.norm_eps)
        writer.add_vocab_size(self.vocab_size)
        if self.head_dim != self.hidden // self.heads:
            writer.add_key_length(self.head_dim)
            writer.add_value_length(self.head_dim)
        return add_rope(writer, self.rope, self.context)

    def shapes(self) -> dict[gguf.MODEL_TENSOR, tuple[int, ...]]:
        """The Hugging Face (row-major) shape of each tensor kind the architecture has."""
        h, q, kv, ff = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {
            T.TOKEN_EMBD: (self.vocab_size, h), T.OUTPUT: (self.vocab_size, h), T.OUTPUT_NORM: (h,),
            T.ATTN_NORM: (h,), T.FFN_NORM: (h,), T.ATTN_Q: (q, h), T.ATTN_K: (kv, h), T.ATTN_V: (kv, h),
            T.ATTN_OUT: (h, q), T.FFN_GATE: (ff, h), T.FFN_UP: (ff, h), T.FFN_DOWN: (h, ff),
        }

    def expected_shape(self, kind: gguf.MODEL_TENSOR, is_bias: bool) -> tuple[int, ...] | None:
        """The shape config.json implies for a tensor, None for kinds this architecture does not have."""
        shape = self.shapes().get(kind)
        return shape[:1] if shape is not None and is_bias else shape

    def bias_allowed(self, kind: gguf.MODEL_TENSOR) -> bool:
        return kind in self.biases

    def layer_tensors(self) -> list[tuple[gguf.MODEL_TENSOR, str]]:
        """(kind, "weight" | "bias") every block must have."""
        return [(kind, "weight") for kind in LLAMA_BLOCK]

    def global_tensors(self) -> list[tuple[gguf.MODEL_TENSOR, str]]:
        head = [] if self.tied else [(T.OUTPUT, "weight")]
        return [(T.TOKEN_EMBD, "weight"), (T.OUTPUT_NORM, "weight")] + head

    def required_names(self) -> list[str]:
        names = [f"{gguf.TENSOR_NAMES[kind]}.{part}" for kind, part in self.global_tensors()]
        for layer in range(self.layers):
            names += [f"{gguf.TENSOR_NAMES[kind].format(bid=layer)}.{part}" for kind, part in self.layer_tensors()]
        return names

    def ignored(self, hf_name: str) -> bool:
        """Tensors the checkpoint may carry that llama.cpp does not read."""
        return hf_name.endswith(IGNORED_SUFFIXES) or (self.tied and self.text_model_name(hf_name) == "lm_head.weight")

    def text_model_name(self, hf_name: str) -> str:
        """The tensor's name in the family's text-only model, which TensorNameMap knows."""
        return hf_name

    def transform(self, kind: gguf.MODEL_TENSOR, array: np.ndarray, is_bias: bool) -> np.ndarray:
        """The tensor as llama.cpp's graph reads it."""
        if self.permute_qk and kind in (T.ATTN_Q, T.ATTN_K):
            return permute_for_rope(array, self.heads if kind == T.ATTN_Q else self.kv_heads)
        if self.norm_offset and kind in NORMS and not is_bias:
            return as_float32(array) + np.float32(self.norm_offset)
        return array
