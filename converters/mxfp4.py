"""MXFP4 direct cast, vectorised, byte-identical to ggml's reference quantizer.

Each block of 32 values shares an E8M0 exponent e = floor(log2(amax)) - 2 + 127; every value is rounded to
the nearest E2M1 code of x / 2^(e-128) (doubled grid 0,1,2,3,4,6,8,12; ties to the smaller magnitude, as
the reference's first-minimum search does). Rounding is a table lookup on the upper 16 bits of the scaled
float; for BF16 input the scaling is integer arithmetic on the exponent field, so the inner loop is a
handful of numpy passes over uint16/uint8 data.
"""

from __future__ import annotations

import numpy as np

BLOCK = 32
BLOCK_BYTES = 17  # one E8M0 exponent byte + 16 bytes of packed 4-bit codes
CHUNK_BLOCKS = 1 << 15  # 1M values per pass: temporaries stay in cache and small

# Decision points between neighbours of the doubled E2M1 grid (0, 1, 2, 3, 4, 6, 8, 12).
_THRESHOLDS = np.array([0.5, 1.5, 2.5, 3.5, 5.0, 7.0, 10.0], dtype=np.float32)


def _code_table(strict: bool) -> np.ndarray:
    """The 4-bit code for every float32 whose upper 16 bits are the index (lower bits zero when ``strict``,
    lower bits set otherwise: then a value on a decision point lies just above it and rounds up)."""
    keys = np.arange(1 << 16, dtype=np.uint32)
    values = (keys << 16).view(np.float32)
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(values)[:, None]
        above = magnitude > _THRESHOLDS[None, :] if strict else magnitude >= _THRESHOLDS[None, :]
    index = above.sum(axis=1).astype(np.uint8)
    index[~np.isfinite(values)] = 0
    negative = (values < 0) & (index > 0)
    return index | (negative.astype(np.uint8) << 3)


_CODES = _code_table(strict=True)
_CODES_ABOVE = _code_table(strict=False)

# BF16 path: a block's amax exponent field is moved to 254 (never below zero, so no clamping), which puts
# scaled values 124 fields above where _CODES expects them; this table undoes that offset.
_REBASE = 124 << 7


def _rebased_table() -> np.ndarray:
    keys = np.arange(1 << 16, dtype=np.int32)
    original = (keys & 0x7FFF) - _REBASE
    codes = _CODES[np.maximum(original, 0) | (keys & 0x8000)]
    codes[original < 0] = 0
    return codes


_CODES_REBASED = _rebased_table()


def _half_scale(exponents: np.ndarray) -> np.ndarray:
    """ggml's E8M0 -> float32 halved (2^(e-128)), including its subnormal cases for e < 2."""
    e = exponents.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


def _quantize_blocks(blocks: np.ndarray, exact_upper_half: bool) -> np.ndarray:
    """blocks: float32 (n, 32) -> uint8 (n, 17)."""
    amax = np.abs(blocks).max(axis=1)
    with np.errstate(divide="ignore"):
        exponents = np.where(amax > 0, np.floor(np.log2(amax)) - 2 + 127, 0).astype(np.uint8)
    scaled = blocks / _half_scale(exponents)[:, None]
    bits = scaled.view(np.uint32)
    keys = (bits >> 16).astype(np.uint16)
    codes = _CODES[keys]
    if not exact_upper_half:
        codes = np.where((bits & 0xFFFF) != 0, _CODES_ABOVE[keys], codes)
    out = np.empty((blocks.shape[0], BLOCK_BYTES), dtype=np.uint8)
    out[:, 0] = exponents
    out[:, 1:] = codes[:, : BLOCK // 2] | (codes[:, BLOCK // 2 :] << 4)
    return out


def _quantize_bf16_blocks(bits: np.ndarray) -> np.ndarray:
    """bits: BF16 as uint16 (n, 32) -> uint8 (n, 17), in integer arithmetic only.

    For a normal amax with exponent field A, the reference's scale is 2^(A-130) and its exponent byte A-2;
    dividing by the scale is subtracting A-130 from each value's exponent field, done here as adding 254-A
    and a table that knows the offset. Blocks with a zero, subnormal or non-finite amax take the float path."""
    magnitude = bits & np.uint16(0x7FFF)
    amax_field = magnitude.max(axis=1) >> 7
    magnitude += ((254 - amax_field) << 7).astype(np.uint16)[:, None]
    magnitude |= bits & np.uint16(0x8000)
    codes = np.take(_CODES_REBASED, magnitude)
    out = np.empty((bits.shape[0], BLOCK_BYTES), dtype=np.uint8)
    out[:, 0] = (amax_field - 2).astype(np.uint8)
    out[:, 1:] = codes[:, : BLOCK // 2] | (codes[:, BLOCK // 2 :] << 4)
    unusual = (amax_field < 3) | (amax_field == 255)
    if unusual.any():
        floats = (bits[unusual].astype(np.uint32) << 16).view(np.float32)
        out[unusual] = _quantize_blocks(floats, exact_upper_half=True)
    return out


def quantize(weights: np.ndarray, bf16_bits: bool = False) -> np.ndarray:
    """Rows of float weights (or raw BF16 bits as uint16) -> MXFP4 bytes, shape (rows, cols // 32 * 17)."""
    rows, cols = weights.shape
    if cols % BLOCK:
        raise ValueError(f"MXFP4 needs rows that are a multiple of {BLOCK} long, not {cols}")
    flat = weights.reshape(-1, BLOCK)
    out = np.empty((flat.shape[0], BLOCK_BYTES), dtype=np.uint8)
    for start in range(0, flat.shape[0], CHUNK_BLOCKS):
        chunk = flat[start : start + CHUNK_BLOCKS]
        if bf16_bits:
            out[start : start + CHUNK_BLOCKS] = _quantize_bf16_blocks(chunk)
        else:
            out[start : start + CHUNK_BLOCKS] = _quantize_blocks(chunk.astype(np.float32, copy=False), False)
    return out.reshape(rows, cols // BLOCK * BLOCK_BYTES)
