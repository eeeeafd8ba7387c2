"""Rotary position embedding settings as config.json gives them, and what llama.cpp needs for each.

Configs say the same thing in several ways: `rope_theta` and `rope_scaling` at the top (transformers 4),
`rope_parameters` (transformers 5), itself split by layer type where local and global layers differ
(Gemma 3). `read_rope` folds them into one `Rope`; `add_rope` writes its KVs and returns the frequency
factor tensors the scaling needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import gguf
import numpy as np

from assistant.errors import AssistantError

T = gguf.MODEL_TENSOR
KINDS = ("linear", "yarn", "llama3", "longrope")
ALIASES = {"su": "longrope"}  # Phi-3's first configs


@dataclass(frozen=True)
class Rope:
    theta: float
    dims: int  # rotated values per head: head_dim, less with a partial rotary factor
    kind: str | None = None  # one of KINDS, None when unscaled
    scaling: dict = field(default_factory=dict, compare=False)
    original_context: int | None = None
    local_theta: float | None = None  # sliding-window layers' base (Gemma 3)


def read_rope(config: dict, head_dim: int, allowed: tuple[str, ...], default_theta: float, config_path) -> Rope:
    params = config.get("rope_parameters") or {}
    full = params.get("full_attention", params)
    local = params.get("sliding_attention", {})
    scaling = dict(config.get("rope_scaling") or {})
    if not scaling and full.get("rope_type", "default") != "default":
        scaling = dict(full)
    kind = scaling.get("rope_type") or scaling.get("type")
    kind = ALIASES.get(kind, kind) if kind != "default" else None
    if kind is not None and kind not in allowed:
        known = ", ".join(allowed) or "none"
        raise AssistantError(f"{config_path}: rope scaling type {kind!r} is not supported for "
                             f"{config['architectures'][0]} (supported: {known})")
    theta = config.get("rope_theta") or full.get("rope_theta") or default_theta
    local_theta = config.get("rope_local_base_freq") or local.get("rope_theta")
    fraction = config.get("partial_rotary_factor") or full.get("partial_rotary_factor") or 1.0
    dims = int(head_dim * fraction)
    if dims % 2 or dims <= 0:
        raise AssistantError(f"{config_path}: partial_rotary_factor {fraction} leaves {dims} rotary values a head")
    original = scaling.get("original_max_position_embeddings") or config.get("original_max_position_embeddings")
    rope = Rope(float(theta), dims, kind, scaling, int(original) if original else None,
                float(local_theta) if local_theta else None)
    if kind == "longrope":
        _check_longrope(rope, config_path)
    return rope


def _check_longrope(rope: Rope, config_path) -> None:
    for key in ("long_factor", "short_factor"):
        factors = rope.scaling.get(key)
        if not isinstance(factors, list) or len(factors) != rope.dims // 2:
            raise AssistantError(f"{config_path}: rope scaling {key} must list {rope.dims // 2} factors "
                                 f"(half the {rope.dims} rotary values)")
    if rope.original_context is None:
        raise AssistantError(f"{config_path}: longrope scaling needs original_max_position_embeddings")


def add_rope(writer: gguf.GGUFWriter, rope: Rope, context: int) -> list[tuple[gguf.MODEL_TENSOR, np.ndarray]]:
    """Write the rope KVs; returns the (kind, values) factor tensors the scaling needs, if any."""
    writer.add_rope_freq_base(rope.theta)
    writer.add_rope_dimension_count(rope.dims)
    if rope.local_theta is not None:
        writer.add_rope_freq_base_swa(rope.local_theta)
    factor = float(rope.scaling.get("factor", 1.0))
    if rope.kind == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(factor)
    elif rope.kind == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(factor)
        writer.add_rope_scaling_orig_ctx_len(rope.original_context or context)
    elif rope.kind == "llama3":
        return [(T.ROPE_FREQS, llama3_factors(rope))]
    elif rope.kind == "longrope":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LONGROPE)
        writer.add_rope_scaling_orig_ctx_len(rope.original_context)
        writer.add_rope_scaling_attn_factors(longrope_attention_factor(rope, context))
        return [(T.ROPE_FACTORS_LONG, np.array(rope.scaling["long_factor"], dtype=np.float32)),
                (T.ROPE_FACTORS_SHORT, np.array(rope.scaling["short_factor"], dtype=np.float32))]
    return []


def llama3_factors(rope: Rope) -> np.ndarray:
    """Per-frequency divisors for Llama 3 rope scaling: 1 for short wavelengths, `factor` for long ones,
    a smooth blend between (ggml divides each base frequency by its factor)."""
    s = rope.scaling
    factor, low, high = float(s["factor"]), float(s.get("low_freq_factor", 1.0)), float(s.get("high_freq_factor", 4.0))
    original = float(s.get("original_max_position_embeddings", 8192))
    inv_freq = 1.0 / rope.theta ** (np.arange(0, rope.dims, 2, dtype=np.float64) / rope.dims)
    wavelength = 2 * math.pi / inv_freq
    smooth = np.clip((original / wavelength - low) / (high - low), 0.0, 1.0)
    divisor = 1.0 / ((1 - smooth) / factor + smooth)
    return divisor.astype(np.float32)


def longrope_attention_factor(rope: Rope, context: int) -> float:
    """LongRoPE scales cos and sin so attention keeps its entropy over the extended context; ggml takes
    the same number as the rope's attention factor."""
    if "attention_factor" in rope.scaling:
        return float(rope.scaling["attention_factor"])
    extension = float(rope.scaling.get("factor") or context / rope.original_context)
    if extension <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(extension) / math.log(rope.original_context))
