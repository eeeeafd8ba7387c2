"""Our vectorised MXFP4 cast against gguf-py's reference quantizer, byte for byte, on values that probe
every rounding decision: random spreads over many magnitudes, exact ties, zeros, signs, huge and tiny."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize as reference

from converters import mxfp4
from converters.encodings import as_bf16_bits as bf16_bits


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("scale", [1e-30, 1e-3, 0.02, 1.0, 300.0, 1e30])
def test_random_values_match_reference(scale):
    rng = np.random.default_rng(int(np.log10(scale) + 40))
    values = (rng.standard_normal((32, 512)) * scale * np.exp(rng.uniform(-3, 3, (32, 1)))).astype(np.float32)
    assert np.array_equal(mxfp4.quantize(values), reference(values, Q.MXFP4))
    bits = bf16_bits(values)
    assert np.array_equal(mxfp4.quantize(bits, bf16_bits=True), reference(bf16_values(bits), Q.MXFP4))


def test_ties_zeros_and_signs_match_reference():
    grid = np.array([0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6], dtype=np.float32)
    ties = np.concatenate([grid, -grid, [np.float32(-0.0)]])
    values = np.zeros((4, 64), dtype=np.float32)
    values[0, : ties.size] = ties  # amax 6: every decision point of the E2M1 grid, exactly
    values[1, : ties.size] = ties * np.float32(1 + 2**-20)  # just above the decision points (float32 only)
    values[2, :32] = -np.float32(2**-130)  # subnormal block
    values[3, 5] = np.float32(-1.0)
    assert np.array_equal(mxfp4.quantize(values), reference(values, Q.MXFP4))
    bits = bf16_bits(values)
    assert np.array_equal(mxfp4.quantize(bits, bf16_bits=True), reference(bf16_values(bits), Q.MXFP4))


def test_rows_must_be_whole_blocks():
    with pytest.raises(ValueError, match="multiple of 32"):
        mxfp4.quantize(np.zeros((2, 48), dtype=np.float32))
