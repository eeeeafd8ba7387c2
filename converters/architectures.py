"""The supported Hugging Face architectures: their GGUF names, hyperparameters and tensor layout.

All four are the Llama block (RMSNorm, GQA attention with rope, SwiGLU); they differ in rope layout,
biases and per-head q/k norms. Tensor names come from gguf-py's TensorNameMap, never from a table here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gguf
import numpy as np

from assistant.errors import AssistantError

# HF architecture -> (GGUF architecture, whether q/k rows must be permuted for ggml's interleaved rope)
SUPPORTED = {
    "LlamaForCausalLM": (gguf.MODEL_ARCH.LLAMA, True),
    "MistralForCausalLM": (gguf.MODEL_ARCH.LLAMA, True),
    "Qwen2ForCausalLM": (gguf.MODEL_ARCH.QWEN2, False),
    "Qwen3ForCausalLM": (gguf.MODEL_ARCH.QWEN3, False),
}
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


@dataclass(frozen=True)
class Architecture:
    hf_name: str
    arch: gguf.MODEL_ARCH
    permute_qk: bool
    vocab_size: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    rms_eps: float
    context: int
    rope_theta: float
    rope_scaling: dict | None
    tied: bool

    @property
    def gguf_name(self) -> str:
        return gguf.MODEL_ARCH_NAMES[self.arch]


def _require(config: dict, key: str, config_path) -> int:
    value = config.get(key)
    if not isinstance(value, int) or value <= 0:
        raise AssistantError(f"{config_path}: {key} must be a positive integer, got {value!r}")
    return value


def read_architecture(config: dict, config_path) -> Architecture:
    names = config.get("architectures") or []
    supported = ", ".join(SUPPORTED)
    if len(names) != 1 or names[0] not in SUPPORTED:
        shown = ", ".join(map(str, names)) or "none"
        raise AssistantError(f"{config_path}: unsupported architecture {shown} (supported: {supported})")
    arch, permute = SUPPORTED[names[0]]
    hidden = _require(config, "hidden_size", config_path)
    heads = _require(config, "num_attention_heads", config_path)
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    rope = config.get("rope_parameters") or {}
    theta = config.get("rope_theta") or rope.get("rope_theta") or 10000.0
    scaling = config.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
    return Architecture(
        hf_name=names[0], arch=arch, permute_qk=permute,
        vocab_size=_require(config, "vocab_size", config_path), hidden=hidden,
        layers=_require(config, "num_hidden_layers", config_path), heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, intermediate=_require(config, "intermediate_size", config_path),
        rms_eps=float(config.get("rms_norm_eps", 1e-6)), context=int(config.get("max_position_embeddings", 4096)),
        rope_theta=float(theta), rope_scaling=scaling, tied=bool(config.get("tie_word_embeddings", False)),
    )


def add_hyperparameters(writer: gguf.GGUFWriter, a: Architecture, config_path) -> np.ndarray | None:
    """Write the model's KV metadata; returns the rope frequency factors tensor when the scaling needs one."""
    writer.add_context_length(a.context)
    writer.add_embedding_length(a.hidden)
    writer.add_block_count(a.layers)
    writer.add_feed_forward_length(a.intermediate)
    writer.add_head_count(a.heads)
    writer.add_head_count_kv(a.kv_heads)
    writer.add_layer_norm_rms_eps(a.rms_eps)
    writer.add_rope_freq_base(a.rope_theta)
    writer.add_rope_dimension_count(a.head_dim)
    writer.add_vocab_size(a.vocab_size)
    if a.head_dim != a.hidden // a.heads:
        writer.add_key_length(a.head_dim)
        writer.add_value_length(a.head_dim)
    if not a.rope_scaling:
        return None
    kind = a.rope_scaling.get("rope_type") or a.rope_scaling.get("type")
    factor = float(a.rope_scaling.get("factor", 1.0))
    if kind == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(factor)
    elif kind == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(factor)
        writer.add_rope_scaling_orig_ctx_len(int(a.rope_scaling.get("original_max_position_embeddings", a.context)))
    elif kind == "llama3":
        return llama3_rope_factors(a)
    else:
        raise AssistantError(f"{config_path}: rope scaling type {kind!r} is not supported (linear, yarn, llama3)")
    return None


def llama3_rope_factors(a: Architecture) -> np.ndarray:
    """Per-frequency divisors for Llama 3 rope scaling: 1 for short wavelengths, `factor` for long ones,
    a smooth blend between (ggml divides each base frequency by its factor)."""
    s = a.rope_scaling
    factor, low, high = float(s["factor"]), float(s.get("low_freq_factor", 1.0)), float(s.get("high_freq_factor", 4.0))
    original = float(s.get("original_max_position_embeddings", 8192))
    inv_freq = 1.0 / a.rope_theta ** (np.arange(0, a.head_dim, 2, dtype=np.float64) / a.head_dim)
    wavelength = 2 * math.pi / inv_freq
    smooth = np.clip((original / wavelength - low) / (high - low), 0.0, 1.0)
    divisor = 1.0 / ((1 - smooth) / factor + smooth)
    return divisor.astype(np.float32)


def expected_shape(a: Architecture, kind: gguf.MODEL_TENSOR, is_bias: bool) -> tuple[int, ...] | None:
    """The Hugging Face (row-major) shape the config implies for a tensor, None for kinds we do not expect."""
    T = gguf.MODEL_TENSOR
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    shapes = {
        T.TOKEN_EMBD: (a.vocab_size, a.hidden), T.OUTPUT: (a.vocab_size, a.hidden), T.OUTPUT_NORM: (a.hidden,),
        T.ATTN_NORM: (a.hidden,), T.FFN_NORM: (a.hidden,), T.ATTN_Q: (q, a.hidden), T.ATTN_K: (kv, a.hidden),
        T.ATTN_V: (kv, a.hidden), T.ATTN_OUT: (a.hidden, q), T.FFN_GATE: (a.intermediate, a.hidden),
        T.FFN_UP: (a.intermediate, a.hidden), T.FFN_DOWN: (a.hidden, a.intermediate),
        T.ATTN_Q_NORM: (a.head_dim,), T.ATTN_K_NORM: (a.head_dim,),
    }
    shape = shapes.get(kind)
    if shape is None:
        return None
    return shape[:1] if is_bias else shape


def bias_allowed(a: Architecture, kind: gguf.MODEL_TENSOR) -> bool:
    """Biases llama.cpp applies for the architecture: Qwen2 on q/k/v; Llama on attention and feed-forward;
    none for Qwen3 (its graph has no attention-output bias)."""
    T = gguf.MODEL_TENSOR
    if a.arch == gguf.MODEL_ARCH.QWEN2:
        return kind in (T.ATTN_Q, T.ATTN_K, T.ATTN_V)
    if a.arch == gguf.MODEL_ARCH.LLAMA:
        return kind in (T.ATTN_Q, T.ATTN_K, T.ATTN_V, T.ATTN_OUT, T.FFN_GATE, T.FFN_UP, T.FFN_DOWN)
    return False


def required_kinds(a: Architecture) -> list[gguf.MODEL_TENSOR]:
    T = gguf.MODEL_TENSOR
    kinds = [T.ATTN_NORM, T.ATTN_Q, T.ATTN_K, T.ATTN_V, T.ATTN_OUT, T.FFN_NORM, T.FFN_GATE, T.FFN_UP, T.FFN_DOWN]
    if a.arch == gguf.MODEL_ARCH.QWEN3:
        kinds += [T.ATTN_Q_NORM, T.ATTN_K_NORM]
    return kinds


def permute_for_rope(rows: np.ndarray, n_head: int) -> np.ndarray:
    """HF stores each head's rotary pairs as (first half, second half); ggml's LLAMA rope wants them
    interleaved. Works on weights (rows, cols) and biases (rows,)."""
    shape = rows.shape
    return rows.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
