"""Our Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 kernel (native/src/q8-gemm.h), compiled on its own and checked against
gguf-py.

As in test_native_kernels.py: built with the system compiler for the baseline CPU (every faster path chosen at
run time) and called through ctypes. The reference is gguf-py's ``dequantize`` of the same ggml blocks times
the quantized activations, in float64; then agreement of every path with scalar, bit for bit, and batch
invariance (a column's bits do not depend on N = 1..16 or on how the rows are split between threads).
"""

from __future__ import annotations

import ctypes
import hashlib
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

SRC = Path(__file__).resolve().parents[1] / "native" / "src"
PATHS = {"scalar": 1, "avx2": 2, "avx-vnni": 3, "avx512-vnni": 4, "neon": 5}
TYPES = {"Q8_0": 0, "Q4_0": 1, "Q4_1": 2, "Q5_0": 3, "Q5_1": 4}
BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24}
WITH_MIN = ("Q4_1", "Q5_1")  # value = q * d + m

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

BASELINE_FLAGS = ["-march=x86-64", "-mtune=generic"] if platform.machine() == "x86_64" else []
c_i64, c_size, c_void, c_int = ctypes.c_int64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int


@pytest.fixture(scope="session")
def lib(tmp_path_factory) -> ctypes.CDLL:
    sources = [SRC / "q8-gemm.cpp"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(SRC.glob("*")) if p.is_file())).hexdigest()[:12]
    out = tmp_path_factory.mktemp("q8") / f"q8-{digest}.so"
    subprocess.run(["c++", "-O3", *BASELINE_FLAGS, "-std=c++17", "-shared", "-fPIC", "-w", "-o", str(out),
                    *map(str, sources)], check=True)
    lib = ctypes.CDLL(str(out))
    lib.q8_path_name.restype = ctypes.c_char_p
    lib.q8_set_path.argtypes = [c_int]
    lib.q8_block_bytes.restype = c_size
    lib.q8_block_bytes.argtypes = [c_int]
    lib.q8_act_bytes.restype = c_size
    lib.q8_act_bytes.argtypes = [c_i64]
    lib.q8_pack.argtypes = lib.q8_unpack.argtypes = [c_int, c_void, c_void, c_i64, c_i64]
    lib.q8_quantize_act.argtypes = [c_void, c_void, c_i64]
    lib.q8_gemm.argtypes = [c_int, c_void, c_i64, c_i64, c_void, c_size, c_i64, c_void, c_i64, c_i64, c_i64]
    return lib


def ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def available(lib) -> list[str]:
    found = [name for name, value in PATHS.items() if lib.q8_set_path(value) == value]
    lib.q8_set_path(0)
    return found


def random_blocks(rng, kind: str, M: int, K: int) -> np.ndarray:
    """M rows of ggml blocks: f16 scales of realistic size (some zero), random quants (Q8_0 -128 included)."""
    nb = K // 32
    blocks = rng.integers(0, 256, size=(M, nb, BLOCK_BYTES[kind]), dtype=np.uint8)
    d = (rng.uniform(0.001, 0.05, size=(M, nb)) * rng.choice([-1, 1], size=(M, nb))).astype(np.float16)
    d[rng.random((M, nb)) < 0.05] = 0
    blocks[:, :, 0:2] = d.view(np.uint8).reshape(M, nb, 2)
    if kind in WITH_MIN:
        m = (-rng.uniform(0.0, 0.4, size=(M, nb))).astype(np.float16)
        blocks[:, :, 2:4] = m.view(np.uint8).reshape(M, nb, 2)
    return blocks


class Packed:
    def __init__(self, lib, kind: str, blocks: np.ndarray, K: int):
        self.lib, self.kind, self.type, self.K = lib, kind, TYPES[kind], K
        self.blocks = np.ascontiguousarray(blocks)
        self.M = blocks.shape[0]
        self.packed = np.empty_like(self.blocks)
        lib.q8_pack(self.type, ptr(self.blocks), ptr(self.packed), self.M, K)
        self.stride = lib.q8_act_bytes(K)

    def prepare(self, x: np.ndarray) -> np.ndarray:
        act = np.zeros((x.shape[0], self.stride), dtype=np.uint8)
        for j in range(x.shape[0]):
            self.lib.q8_quantize_act(ptr(np.ascontiguousarray(x[j], dtype=np.float32)), ptr(act[j]), self.K)
        return act

    def gemm(self, act: np.ndarray, splits=None) -> np.ndarray:
        N = act.shape[0]
        out = np.full((N, self.M), np.nan, dtype=np.float32)
        bounds = splits or [0, self.M]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            self.lib.q8_gemm(self.type, ptr(self.packed), self.M, self.K, ptr(act), self.stride, N, ptr(out), self.M,
                             lo, hi)
        return out

    def weights(self) -> np.ndarray:
        return dequantize(self.blocks.reshape(-1), GGMLQuantizationType[self.kind]).reshape(self.M, self.K).astype(np.float64)

    def magnitudes(self) -> np.ndarray:
        """|q * d| + |m| per weight: the size of the terms our sums add (an m term is summed apart)."""
        if self.kind not in WITH_MIN:
            return np.abs(self.weights())
        m = self.blocks[:, :, 2:4].copy().view(np.float16).astype(np.float64).reshape(self.M, -1)
        m = np.repeat(m, 32, axis=1)
        return np.abs(self.weights() - m) + np.abs(m)

    def activations(self, act: np.ndarray) -> np.ndarray:
        K = self.K
        q = act[:, :K].view(np.int8).astype(np.float64)
        d = act[:, K:K + K // 8].copy().view(np.float32).astype(np.float64)
        return q * np.repeat(d, 32, axis=1)


def bound(p: Packed, act: np.ndarray) -> np.ndarray:
    """float32 rounding of a block's scale product and of two fmas per block, over K/32 blocks."""
    return (2 * p.K // 32 + 4) * 2.0 ** -24 * (np.abs(p.activations(act)) @ p.magnitudes().T) + 1e-30


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("M,K,N", [(16, 32, 1), (37, 96, 3), (131, 512, 7), (64, 2048, 16), (200, 1024, 19),
                                   (20, 8192, 2)])
def test_matches_gguf_dequantize_in_float64(lib, kind, M, K, N):
    rng = np.random.default_rng(M * 1000 + N + TYPES[kind])
    p = Packed(lib, kind, random_blocks(rng, kind, M, K), K)
    act = p.prepare(rng.standard_normal((N, K)).astype(np.float32))
    ref = p.activations(act) @ p.weights().T
    tolerance = bound(p, act)
    for path in available(lib):
        lib.q8_set_path(PATHS[path])
        got = p.gemm(act)
        assert np.all(np.abs(got - ref) <= tolerance), (kind, path, np.max(np.abs(got - ref) / tolerance))
    lib.q8_set_path(0)


def test_quantized_activations_follow_the_recipe(lib):
    """int8 per block of 32, scale amax/127, then the block's sum of q and d * sum as a float."""
    rng = np.random.default_rng(1)
    K = 256
    x = (rng.standard_normal(K) * np.repeat(rng.uniform(0.01, 100, K // 32), 32)).astype(np.float32)
    x[:32] = 0.0
    for path in available(lib):
        lib.q8_set_path(PATHS[path])
        act = Packed(lib, "Q8_0", random_blocks(rng, "Q8_0", 16, K), K).prepare(x[None])[0]
        q = act[:K].view(np.int8).astype(np.int64).reshape(-1, 32)
        d = act[K:K + K // 8].copy().view(np.float32)
        s = act[K + K // 8:K + K // 4].copy().view(np.int32)
        ds = act[K + K // 4:K + 3 * K // 8].copy().view(np.float32)
        amax = np.abs(x.reshape(-1, 32)).max(axis=1)
        assert np.array_equal(d, (amax / np.float32(127)).astype(np.float32)), path
        assert np.abs(q).max() <= 127
        assert np.array_equal(s, q.sum(axis=1)), path
        assert np.array_equal(ds, d * s.astype(np.float32)), path
        assert np.all(np.abs(q * d[:, None].astype(np.float64) - x.reshape(-1, 32)) <= d[:, None] * 0.5001)
    lib.q8_set_path(0)


@pytest.mark.parametrize("kind", TYPES)
def test_pack_round_trips_bit_for_bit(lib, kind):
    rng = np.random.default_rng(2)
    assert lib.q8_block_bytes(TYPES[kind]) == BLOCK_BYTES[kind]
    for M, K in ((45, 160), (16, 32), (3, 64)):
        p = Packed(lib, kind, random_blocks(rng, kind, M, K), K)
        assert not np.array_equal(p.packed, p.blocks) or M == 1
        back = np.empty_like(p.blocks)
        lib.q8_unpack(p.type, ptr(p.packed), ptr(back), M, K)
        assert np.array_equal(back, p.blocks), (kind, M, K)


@pytest.mark.parametrize("kind", TYPES)
def test_paths_agree_bit_for_bit(lib, kind):
    """Every path does the same integer sums and the same float operations in the same order."""
    paths = available(lib)
    if platform.machine() == "x86_64" and "avx2" in Path("/proc/cpuinfo").read_text():
        assert "avx2" in paths
    rng = np.random.default_rng(3)
    p = Packed(lib, kind, random_blocks(rng, kind, 70, 384), 384)
    x = rng.standard_normal((37, 384)).astype(np.float32)  # past 16 columns: several column groups
    results = {}
    for path in paths:
        lib.q8_set_path(PATHS[path])
        act = p.prepare(x)
        results[path] = (act, p.gemm(act))
    lib.q8_set_path(0)
    first = results["scalar"]
    for path in paths:
        assert np.array_equal(results[path][0], first[0]), ("quantized activations", path)
        assert np.array_equal(results[path][1], first[1]), (kind, path)


def tile_splits(M: int, parts: int) -> list[int]:
    """Row bounds splitting ceil(M / 16) tiles into ``parts`` ranges as ggml's threads do."""
    tiles = (M + 15) // 16
    return sorted({min(M, tiles * i // parts * 16) for i in range(parts + 1)})


@pytest.mark.parametrize("kind", TYPES)
def test_batch_invariant_across_n_and_row_splits(lib, kind):
    """A column's bits are the same whatever N (1..16, and beyond) and however the rows are split (1 to 7
    threads); M = 100 leaves a short last tile."""
    rng = np.random.default_rng(4)
    M, K = 100, 1024
    p = Packed(lib, kind, random_blocks(rng, kind, M, K), K)
    act = p.prepare(rng.standard_normal((40, K)).astype(np.float32))
    for path in available(lib):
        lib.q8_set_path(PATHS[path])
        alone = np.stack([p.gemm(np.ascontiguousarray(act[j:j + 1]))[0] for j in range(40)])
        for n in [*range(1, 17), 19, 40]:
            for parts in range(1, 8):
                got = p.gemm(np.ascontiguousarray(act[:n]), tile_splits(M, parts))
                assert np.array_equal(got, alone[:n]), (kind, path, n, parts)
    lib.q8_set_path(0)
