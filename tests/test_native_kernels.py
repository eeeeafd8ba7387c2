"""Our MXFP4 and BF16 kernels (native/src), compiled on their own and checked against float64 references.

The kernels have a small C API with no ggml dependency, so these tests build them in seconds with the
system compiler and call them through ctypes: correctness on awkward shapes, agreement between the
instruction paths, and batch invariance (a column's bits do not depend on N or on the row split).
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
from gguf.quants import dequantize, quantize

SRC = Path(__file__).resolve().parents[1] / "native" / "src"
KERNEL_FILES = ("mxfp4-gemm.cpp", "bf16-gemm.cpp")

MXFP4_PATHS = {"scalar": 1, "avx-vnni": 2, "avx512-vnni": 3, "amx": 4, "avx2": 5, "neon": 6}
BF16_PATHS = {"scalar": 1, "avx2": 2, "avx512": 3, "avx512-bf16": 4, "amx": 5}

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

BASELINE_FLAGS = ["-march=x86-64", "-mtune=generic"] if platform.machine() == "x86_64" else []

c_i64, c_size, c_void = ctypes.c_int64, ctypes.c_size_t, ctypes.c_void_p


@pytest.fixture(scope="session")
def lib(tmp_path_factory) -> ctypes.CDLL:
    """The kernels as one shared library, built as the native build builds them: for the baseline CPU
    (-march=x86-64), every faster path chosen at run time."""
    sources = [SRC / name for name in KERNEL_FILES if (SRC / name).exists()]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(SRC.glob("*")) if p.is_file())).hexdigest()[:12]
    out = tmp_path_factory.mktemp("kernels") / f"kernels-{digest}.so"
    subprocess.run(["c++", "-O3", *BASELINE_FLAGS, "-std=c++17", "-shared", "-fPIC", "-w", "-o", str(out),
                    *map(str, sources)], check=True)
    lib = ctypes.CDLL(str(out))
    lib.mxfp4_path_name.restype = ctypes.c_char_p
    lib.mxfp4_act_bytes.restype = c_size
    lib.mxfp4_act_bytes.argtypes = [c_i64]
    lib.mxfp4_pack.argtypes = lib.mxfp4_unpack.argtypes = [c_void, c_void, c_i64, c_i64]
    lib.mxfp4_quantize_act.argtypes = [c_void, c_void, c_i64]
    lib.mxfp4_gemm.argtypes = [c_void, c_i64, c_i64, c_void, c_size, c_i64, c_void, c_i64, c_i64, c_i64]
    if hasattr(lib, "bf16_gemm"):
        lib.bf16_path_name.restype = ctypes.c_char_p
        lib.bf16_pack.argtypes = lib.bf16_unpack.argtypes = [c_void, c_void, c_i64, c_i64]
        lib.bf16_convert_act.argtypes = [c_void, c_void, c_i64]
        lib.bf16_act_bytes.restype = c_size
        lib.bf16_act_bytes.argtypes = [c_i64]
        lib.bf16_set_path.argtypes = lib.mxfp4_set_path.argtypes = [ctypes.c_int]
        lib.bf16_gemm.argtypes = [c_void, c_i64, c_i64, c_void, c_size, c_i64, c_void, c_i64, c_i64, c_i64]
    return lib


def ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def available(lib, setter: str, paths: dict[str, int]) -> list[str]:
    """The instruction paths this CPU can run (setting a path the CPU lacks is refused)."""
    found = []
    for name, value in paths.items():
        if getattr(lib, setter)(value) == value:
            found.append(name)
    getattr(lib, setter)(0)
    return found


class PackedWeights:
    """A weight matrix packed for one of our kernels: prepare activation columns, run the gemm over row splits."""

    kind = ""  # the C API's prefix: mxfp4_* or bf16_*
    prepare_column = ""  # the C function that prepares one activation column

    def __init__(self, lib, source: np.ndarray, M: int, K: int):
        self.lib, self.M, self.K = lib, M, K
        self.packed = np.empty_like(source)
        getattr(lib, f"{self.kind}_pack")(ptr(source), ptr(self.packed), M, K)
        self.stride = getattr(lib, f"{self.kind}_act_bytes")(K)

    def prepare(self, x: np.ndarray) -> np.ndarray:
        """x: (N, K) float32 -> (N, stride) bytes of prepared columns."""
        act = np.zeros((x.shape[0], self.stride), dtype=np.uint8)
        prepare = getattr(self.lib, self.prepare_column)
        for j in range(x.shape[0]):
            prepare(ptr(np.ascontiguousarray(x[j], dtype=np.float32)), ptr(act[j]), self.K)
        return act

    def gemm(self, act: np.ndarray, splits=None) -> np.ndarray:
        N = act.shape[0]
        out = np.full((N, self.M), np.nan, dtype=np.float32)
        bounds = splits or [0, self.M]
        gemm = getattr(self.lib, f"{self.kind}_gemm")
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            gemm(ptr(self.packed), self.M, self.K, ptr(act), self.stride, N, ptr(out), self.M, lo, hi)
        return out


# ---------------------------------------------------------------- MXFP4

def random_mxfp4(rng, M: int, K: int) -> np.ndarray:
    """M rows of ggml block_mxfp4 (17 bytes per 32 values): realistic exponents, random codes."""
    blocks = rng.integers(0, 256, size=(M, K // 32, 17), dtype=np.uint8)
    blocks[:, :, 0] = rng.integers(118, 128, size=(M, K // 32))
    return blocks


class Mxfp4(PackedWeights):
    kind, prepare_column = "mxfp4", "mxfp4_quantize_act"

    def __init__(self, lib, blocks: np.ndarray, K: int):
        self.blocks = np.ascontiguousarray(blocks)
        super().__init__(lib, self.blocks, blocks.shape[0], K)

    def dequantized_activations(self, act: np.ndarray) -> np.ndarray:
        K = self.K
        q = act[:, :K].view(np.int8).astype(np.float64)
        d = act[:, K:K + K // 32 * 4].copy().view(np.float32).astype(np.float64)
        return q * np.repeat(d, 32, axis=1)

    def reference(self, act: np.ndarray) -> np.ndarray:
        w = dequantize(self.blocks.reshape(-1), GGMLQuantizationType.MXFP4).reshape(self.M, self.K)
        return self.dequantized_activations(act) @ w.astype(np.float64).T


@pytest.mark.parametrize("M,K,N", [(16, 32, 1), (37, 96, 3), (131, 512, 7), (64, 2048, 16), (200, 1024, 19)])
def test_mxfp4_matches_float64_reference(lib, M, K, N):
    rng = np.random.default_rng(M * 1000 + N)
    mx = Mxfp4(lib, random_mxfp4(rng, M, K), K)
    act = mx.prepare(rng.standard_normal((N, K)).astype(np.float32))
    ref = mx.reference(act)
    for path in available(lib, "mxfp4_set_path", MXFP4_PATHS):
        lib.mxfp4_set_path(MXFP4_PATHS[path])
        got = mx.gemm(act)
        # float32 accumulation over K/32 block sums: error relative to the sum of |terms|
        scale = np.abs(mx.dequantized_activations(act)) @ np.abs(
            dequantize(mx.blocks.reshape(-1), GGMLQuantizationType.MXFP4).reshape(M, K).astype(np.float64)).T
        assert np.all(np.abs(got - ref) <= 1e-6 * scale + 1e-30), path
    lib.mxfp4_set_path(0)


def test_mxfp4_quantized_activations_follow_the_recipe(lib):
    """int8 per block of 32, scale amax/127, and the stored bias is -12 * sum(q)."""
    rng = np.random.default_rng(1)
    K = 256
    x = (rng.standard_normal(K) * np.repeat(rng.uniform(0.01, 100, K // 32), 32)).astype(np.float32)
    x[:32] = 0.0  # an all-zero block must not divide by zero
    mx = Mxfp4(lib, random_mxfp4(rng, 16, K), K)
    for path in available(lib, "mxfp4_set_path", MXFP4_PATHS):
        lib.mxfp4_set_path(MXFP4_PATHS[path])
        act = mx.prepare(x[None])[0]
        q = act[:K].view(np.int8).astype(np.int64).reshape(-1, 32)
        d = act[K:K + K // 8].copy().view(np.float32)
        bias = act[K + K // 8:K + K // 4].copy().view(np.int32)
        amax = np.abs(x.reshape(-1, 32)).max(axis=1)
        assert np.array_equal(d, (amax / np.float32(127)).astype(np.float32))
        assert np.abs(q).max() <= 127
        assert np.array_equal(bias, -12 * q.sum(axis=1))
        assert np.all(np.abs(q * d[:, None].astype(np.float64) - x.reshape(-1, 32)) <= d[:, None] * 0.5001)
    lib.mxfp4_set_path(0)


def test_mxfp4_pack_round_trips(lib):
    rng = np.random.default_rng(2)
    blocks = random_mxfp4(rng, 45, 160)
    mx = Mxfp4(lib, blocks, 160)
    assert not np.array_equal(mx.packed, blocks)
    back = np.empty_like(blocks)
    lib.mxfp4_unpack(ptr(mx.packed), ptr(back), 45, 160)
    assert np.array_equal(back, blocks)


def test_mxfp4_paths_agree_bit_for_bit(lib):
    """Every path does the same integer sums and the same float operations in the same order."""
    paths = available(lib, "mxfp4_set_path", MXFP4_PATHS)
    rng = np.random.default_rng(3)
    mx = Mxfp4(lib, random_mxfp4(rng, 70, 384), 384)
    x = rng.standard_normal((37, 384)).astype(np.float32)  # AMX: two chunks of 16 and a short one
    results = {}
    for path in paths:
        lib.mxfp4_set_path(MXFP4_PATHS[path])
        act = mx.prepare(x)
        results[path] = (act, mx.gemm(act))
    lib.mxfp4_set_path(0)
    first = results[paths[0]]
    for path in paths:
        assert np.array_equal(results[path][0], first[0]), ("quantized activations", path, paths[0])
        assert np.array_equal(results[path][1], first[1]), (path, paths[0])


def test_mxfp4_is_batch_invariant(lib):
    """Column 0's bits are the same whatever N is and however the rows are split across threads."""
    rng = np.random.default_rng(4)
    M, K = 100, 1024
    mx = Mxfp4(lib, random_mxfp4(rng, M, K), K)
    act = mx.prepare(rng.standard_normal((40, K)).astype(np.float32))
    for path in available(lib, "mxfp4_set_path", MXFP4_PATHS):
        lib.mxfp4_set_path(MXFP4_PATHS[path])
        alone = mx.gemm(act[:1])[0]
        for n in (1, 3, 5, 8, 9, 16, 40):  # AVX2 passes take up to 6 columns; AMX takes over from 9
            for splits in ([0, M], [0, 48, M], [0, 16, 32, 96, M]):
                got = mx.gemm(np.ascontiguousarray(act[:n]), splits)
                assert np.array_equal(got[0], alone), (path, n, splits)
                # and every other column equals that column computed alone
                j = n - 1
                assert np.array_equal(got[j], mx.gemm(np.ascontiguousarray(act[j:j + 1]))[0]), (path, n, j)
    lib.mxfp4_set_path(0)


# ---------------------------------------------------------------- BF16

def to_bf16(x: np.ndarray) -> np.ndarray:
    """gguf-py's BF16 conversion (ggml's round-to-nearest-even), as uint16."""
    return quantize(np.ascontiguousarray(x, dtype=np.float32), GGMLQuantizationType.BF16).view(np.uint16)


def bf16_to_f64(v: np.ndarray) -> np.ndarray:
    return (v.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


class Bf16(PackedWeights):
    kind, prepare_column = "bf16", "bf16_convert_act"

    def __init__(self, lib, w: np.ndarray):
        self.rows = np.ascontiguousarray(w, dtype=np.uint16)
        super().__init__(lib, self.rows, *w.shape)

    def rounded(self, act: np.ndarray) -> np.ndarray:
        """The bf16 values of prepared columns, as uint16 (checked to agree with their f32 copy, where the
        path in use reads one)."""
        K = self.K
        as_bf16 = act[:, 4 * K:6 * K].copy().view(np.uint16)
        if self.lib.bf16_path_name() != b"amx":
            as_f32 = act[:, :4 * K].copy().view(np.float32)
            assert np.array_equal(as_f32.view(np.uint32), as_bf16.astype(np.uint32) << 16)
        return as_bf16


def random_bf16(rng, M: int, K: int) -> np.ndarray:
    return to_bf16(rng.standard_normal((M, K)) * 0.05).reshape(M, K)


def test_bf16_activation_conversion_matches_gguf(lib):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 256)) * 10.0 ** rng.integers(-30, 30, size=(3, 256))).astype(np.float32)
    x[0, :4] = [0.0, -0.0, np.inf, -np.inf]
    bf = Bf16(lib, random_bf16(rng, 16, 256))
    for path in available(lib, "bf16_set_path", BF16_PATHS):
        lib.bf16_set_path(BF16_PATHS[path])
        assert np.array_equal(bf.rounded(bf.prepare(x)), to_bf16(x).reshape(x.shape)), path
    lib.bf16_set_path(0)


@pytest.mark.parametrize("M,K,N", [(16, 32, 1), (37, 96, 3), (131, 512, 7), (64, 2048, 16), (200, 1024, 19),
                                   (96, 1024, 64), (200, 2080, 45)])  # prompts: whole chunks; K blocks, a short chunk
def test_bf16_matches_float64_reference(lib, M, K, N):
    rng = np.random.default_rng(M * 1000 + N + 7)
    bf = Bf16(lib, random_bf16(rng, M, K))
    x = rng.standard_normal((N, K)).astype(np.float32)
    terms_w, terms_a = bf16_to_f64(bf.rows), bf16_to_f64(to_bf16(x).reshape(N, K))
    ref = terms_a @ terms_w.T
    bound = np.abs(terms_a) @ np.abs(terms_w).T * (K * 2.0 ** -24)  # float32 accumulation over K terms
    for path in available(lib, "bf16_set_path", BF16_PATHS):
        lib.bf16_set_path(BF16_PATHS[path])
        got = bf.gemm(bf.prepare(x))
        assert np.all(np.abs(got - ref) <= bound), path
        assert np.median(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-3)) < 1e-5, path
    lib.bf16_set_path(0)


def test_bf16_pack_round_trips(lib):
    rng = np.random.default_rng(6)
    bf = Bf16(lib, random_bf16(rng, 45, 160))
    assert not np.array_equal(bf.packed, bf.rows)
    back = np.empty_like(bf.rows)
    lib.bf16_unpack(ptr(bf.packed), ptr(back), 45, 160)
    assert np.array_equal(back, bf.rows)


def test_bf16_widening_paths_agree_bit_for_bit(lib):
    """The scalar, AVX2 and AVX-512 paths run the same fma sequence (K = 2560 spans two of the AVX2 path's
    chunks of 2048 values, the second one short, whose accumulators are stored and reloaded between them;
    15 columns make AVX2 groups of 6, 6 and 3, the last taking both halves of a tile in one pass)."""
    paths = [p for p in available(lib, "bf16_set_path", BF16_PATHS) if p not in ("avx512-bf16", "amx")]
    assert len(paths) > 1 or platform.machine() != "x86_64" or "avx2" not in Path("/proc/cpuinfo").read_text()
    rng = np.random.default_rng(8)
    bf = Bf16(lib, random_bf16(rng, 70, 2560))
    x = rng.standard_normal((15, 2560)).astype(np.float32)
    results = []
    for path in paths:
        lib.bf16_set_path(BF16_PATHS[path])
        results.append(bf.gemm(bf.prepare(x)))
    lib.bf16_set_path(0)
    assert all(np.array_equal(r, results[0]) for r in results)


def test_bf16_is_batch_invariant(lib):
    """Verification sizes (N = 1..16) give a column the bits it gets alone, on every path. Prompts (N > 16)
    may take another path (AMX keeps the same bits; the vector paths' blocked GEMM does not), but among
    themselves a column's bits depend neither on N nor on the row split. M = 100 leaves a short last tile."""
    rng = np.random.default_rng(9)
    M, K = 100, 2080  # the prompt paths take K in blocks (AMX: 1024 values, the vector paths 256 or so)
    bf = Bf16(lib, random_bf16(rng, M, K))
    x = rng.standard_normal((45, K)).astype(np.float32)
    for path in available(lib, "bf16_set_path", BF16_PATHS):
        lib.bf16_set_path(BF16_PATHS[path])
        act = bf.prepare(x)
        alone = bf.gemm(act[:1])[0]
        prompt = bf.gemm(act)
        for n in (1, 3, 4, 5, 8, 9, 16, 17, 19, 32, 45):
            for splits in ([0, M], [0, 48, M], [0, 16, 32, 96, M]):
                got = bf.gemm(np.ascontiguousarray(act[:n]), splits)
                j = n - 1
                if n <= 16:
                    assert np.array_equal(got[0], alone), (path, n, splits)
                    assert np.array_equal(got[j], bf.gemm(np.ascontiguousarray(act[j:j + 1]))[0]), (path, n, j)
                else:
                    assert np.array_equal(got, prompt[:n]), (path, n, splits)
    lib.bf16_set_path(0)


def test_bf16_decode_path_is_chosen_by_measurement(lib, monkeypatch):
    """Off AMX, a CPU with AVX512-BF16 decodes with vdpbf16ps or with widening + FMA as a start-up measurement
    finds faster (the verdict replaced through ASSISTANT_BF16_TEST_DOT_FASTER here, AMX left out through
    ASSISTANT_BF16_TEST_NO_AMX). The default then computes what that path computes when named, and a column
    has the same bits in every verification batch."""
    paths = available(lib, "bf16_set_path", BF16_PATHS)
    if "avx512-bf16" not in paths:
        pytest.skip("needs a CPU with AVX512-BF16")
    monkeypatch.setenv("ASSISTANT_BF16_TEST_NO_AMX", "1")
    try:
        for verdict, expected in (("1", b"avx512-bf16"), ("0", b"avx512")):
            monkeypatch.setenv("ASSISTANT_BF16_TEST_DOT_FASTER", verdict)
            lib.bf16_set_path(0)
            assert lib.bf16_path_name() == expected
        monkeypatch.delenv("ASSISTANT_BF16_TEST_DOT_FASTER")
        lib.bf16_set_path(0)
        measured = lib.bf16_path_name()
        assert measured in (b"avx512", b"avx512-bf16")

        rng = np.random.default_rng(11)
        M, K = 100, 1056
        bf = Bf16(lib, random_bf16(rng, M, K))
        act = bf.prepare(rng.standard_normal((16, K)).astype(np.float32))
        default = bf.gemm(act)
        lib.bf16_set_path(0)
        assert lib.bf16_path_name() == measured, "measured once per process, so the same path every time"
        for n in (1, 2, 3, 4, 8, 9, 16):
            assert np.array_equal(bf.gemm(np.ascontiguousarray(act[:n]), [0, 48, M]), default[:n]), (measured, n)
        lib.bf16_set_path(BF16_PATHS[measured.decode()])
        assert np.array_equal(bf.gemm(act), default)
        other = b"avx512" if measured == b"avx512-bf16" else b"avx512-bf16"
        lib.bf16_set_path(BF16_PATHS[other.decode()])
        assert not np.array_equal(bf.gemm(act), default), "the two paths round differently"
    finally:
        monkeypatch.undo()
        lib.bf16_set_path(0)
