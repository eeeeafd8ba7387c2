"""Our Q4_K, Q5_K and Q6_K kernels (native/src/kquant-gemm.*), compiled on their own and checked against gguf-py.

As tests/test_native_kernels.py does for MXFP4 and BF16: the weights are random ggml blocks, dequantized by
gguf-py (the reference for the layouts), times the kernel's own int8 activations in float64; every path this
CPU runs (the AVX2 one forced, as Zen 3 would take it) must equal the scalar reference bit for bit, and a
column's bits must not depend on N or on the row split.
"""

from __future__ import annotations

import ctypes
import platform
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

SRC = Path(__file__).resolve().parents[1] / "native" / "src"
PATHS = {"scalar": 1, "avx2": 2, "avx-vnni": 3, "avx512-vnni": 4, "neon": 5}
TYPES = {"Q4_K": (12, 144, GGMLQuantizationType.Q4_K), "Q5_K": (13, 176, GGMLQuantizationType.Q5_K),
         "Q6_K": (14, 210, GGMLQuantizationType.Q6_K)}

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

BASELINE_FLAGS = ["-march=x86-64", "-mtune=generic"] if platform.machine() == "x86_64" else []
c_i64, c_size, c_void, c_int = ctypes.c_int64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int


@pytest.fixture(scope="session")
def kernel_so(tmp_path_factory) -> Path:
    """Built as the native build builds it: for the baseline CPU, every faster path chosen at run time."""
    out = tmp_path_factory.mktemp("kquant") / "kquant.so"
    subprocess.run(["c++", "-O3", *BASELINE_FLAGS, "-std=c++17", "-shared", "-fPIC", "-w", "-o", str(out),
                    str(SRC / "kquant-gemm.cpp")], check=True)
    return out


@pytest.fixture(scope="session")
def lib(kernel_so) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(kernel_so))
    lib.kquant_path_name.restype = ctypes.c_char_p
    lib.kquant_set_path.argtypes = [c_int]
    lib.kquant_act_bytes.restype = lib.kquant_row_bytes.restype = c_size
    lib.kquant_act_bytes.argtypes = [c_i64]
    lib.kquant_row_bytes.argtypes = [c_int, c_i64]
    lib.kquant_pack.argtypes = lib.kquant_unpack.argtypes = [c_int, c_void, c_void, c_i64, c_i64]
    lib.kquant_quantize_act.argtypes = [c_void, c_void, c_i64]
    lib.kquant_gemm.argtypes = [c_int, c_void, c_i64, c_i64, c_void, c_size, c_i64, c_void, c_i64, c_i64, c_i64]
    return lib


def ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def available(lib) -> list[str]:
    found = [name for name, value in PATHS.items() if lib.kquant_set_path(value) == value]
    lib.kquant_set_path(0)
    return found


def f16_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).view(np.uint8).reshape(*values.shape, 2)


def random_blocks(rng, kind: str, M: int, K: int) -> np.ndarray:
    """M rows of ggml blocks with random bits, the f16 factors set to realistic sizes (no inf or NaN)."""
    _, size, _ = TYPES[kind]
    blocks = rng.integers(0, 256, size=(M, K // 256, size), dtype=np.uint8)
    if kind in ("Q4_K", "Q5_K"):
        blocks[:, :, 0:2] = f16_bytes(rng.uniform(1e-4, 2e-3, (M, K // 256)))
        blocks[:, :, 2:4] = f16_bytes(rng.uniform(1e-4, 2e-3, (M, K // 256)))
    else:
        blocks[:, :, 208:210] = f16_bytes(rng.uniform(1e-5, 1e-3, (M, K // 256)))
    return blocks


class Packed:
    def __init__(self, lib, kind: str, blocks: np.ndarray, K: int):
        self.lib, self.kind, self.K, self.M = lib, kind, K, blocks.shape[0]
        self.type, _, self.gguf_type = TYPES[kind]
        self.blocks = np.ascontiguousarray(blocks)
        self.packed = np.empty_like(self.blocks)
        lib.kquant_pack(self.type, ptr(self.blocks), ptr(self.packed), self.M, K)
        self.stride = lib.kquant_act_bytes(K)

    def prepare(self, x: np.ndarray) -> np.ndarray:
        act = np.zeros((x.shape[0], self.stride), dtype=np.uint8)
        for j in range(x.shape[0]):
            self.lib.kquant_quantize_act(ptr(np.ascontiguousarray(x[j], dtype=np.float32)), ptr(act[j]), self.K)
        return act

    def gemm(self, act: np.ndarray, splits=None) -> np.ndarray:
        N = act.shape[0]
        out = np.full((N, self.M), np.nan, dtype=np.float32)
        bounds = splits or [0, self.M]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            self.lib.kquant_gemm(self.type, ptr(self.packed), self.M, self.K, ptr(act), self.stride, N, ptr(out),
                                 self.M, lo, hi)
        return out

    def weights(self) -> np.ndarray:
        return dequantize(self.blocks.reshape(-1), self.gguf_type).reshape(self.M, self.K).astype(np.float64)

    def dequantized_activations(self, act: np.ndarray) -> np.ndarray:
        K = self.K
        q = act[:, :K].view(np.int8).astype(np.float64)
        d = act[:, K:K + K // 8].copy().view(np.float32).astype(np.float64)
        return q * np.repeat(d, 32, axis=1)


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("M,K,N", [(16, 256, 1), (37, 512, 3), (131, 256, 7), (64, 2048, 16), (45, 8960, 2),
                                   (200, 768, 19)])
def test_matches_gguf_dequantize_times_float64(lib, kind, M, K, N):
    rng = np.random.default_rng(M * 1000 + N + K)
    w = Packed(lib, kind, random_blocks(rng, kind, M, K), K)
    act = w.prepare(rng.standard_normal((N, K)).astype(np.float32))
    a = w.dequantized_activations(act)
    ref = a @ w.weights().T
    # float32 accumulation of per-block sums: error relative to the sum of |terms|, where Q4_K's and Q5_K's terms
    # are their scaled values and their mins, summed apart (each is the file's dequantization with the other
    # factor zeroed)
    scale = np.abs(a) @ np.abs(w.weights()).T
    if kind in ("Q4_K", "Q5_K"):
        parts = [w.blocks.copy(), w.blocks.copy()]
        parts[0][:, :, 2:4] = 0  # dmin = 0: d * scale * q
        parts[1][:, :, 0:2] = 0  # d = 0: -dmin * min
        scale = sum(np.abs(a) @ np.abs(dequantize(p.reshape(-1), w.gguf_type).reshape(M, K).astype(np.float64)).T
                    for p in parts)
    for path in available(lib):
        lib.kquant_set_path(PATHS[path])
        got = w.gemm(act)
        assert np.all(np.abs(got - ref) <= 2e-6 * scale + 1e-30), (path, np.abs(got - ref).max(), scale.max())
    lib.kquant_set_path(0)


def test_activations_follow_the_recipe(lib):
    """int8 per block of 32 with scale amax/127; scale * sum per 32 and -32 * sum per 16 beside them."""
    rng = np.random.default_rng(1)
    K = 512
    x = (rng.standard_normal(K) * np.repeat(rng.uniform(0.01, 100, K // 32), 32)).astype(np.float32)
    x[:32] = 0.0  # an all-zero block must not divide by zero
    act = Packed(lib, "Q4_K", random_blocks(rng, "Q4_K", 16, K), K).prepare(x[None])[0]
    q = act[:K].view(np.int8).astype(np.int64)
    d = act[K:K + K // 8].copy().view(np.float32)
    dsum = act[K + K // 8:K + K // 4].copy().view(np.float32)
    bias16 = act[K + K // 4:K + K // 2].copy().view(np.int32)
    amax = np.abs(x.reshape(-1, 32)).max(axis=1)
    assert np.array_equal(d, (amax / np.float32(127)).astype(np.float32))
    assert np.abs(q).max() <= 127
    assert np.array_equal(dsum, d * q.reshape(-1, 32).sum(axis=1).astype(np.float32))
    assert np.array_equal(bias16, -32 * q.reshape(-1, 16).sum(axis=1))
    assert np.all(np.abs(q.reshape(-1, 32) * d[:, None].astype(np.float64) - x.reshape(-1, 32)) <= d[:, None] * 0.5001)


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("M", [16, 45, 7])
def test_pack_round_trips_bit_for_bit(lib, kind, M):
    rng = np.random.default_rng(2)
    K = 768
    w = Packed(lib, kind, random_blocks(rng, kind, M, K), K)
    assert lib.kquant_row_bytes(w.type, K) == w.blocks.shape[1] * w.blocks.shape[2]
    assert not np.array_equal(w.packed, w.blocks)
    back = np.empty_like(w.blocks)
    lib.kquant_unpack(w.type, ptr(w.packed), ptr(back), M, K)
    assert np.array_equal(back, w.blocks)


@pytest.mark.parametrize("kind", TYPES)
def test_paths_agree_bit_for_bit(lib, kind):
    """Every path does the same integer sums and the same float operations in the same order."""
    paths = available(lib)
    assert "avx2" in paths or platform.machine() != "x86_64"  # every x86-64 CPU we serve has AVX2
    rng = np.random.default_rng(3)
    w = Packed(lib, kind, random_blocks(rng, kind, 70, 1280), 1280)
    act = w.prepare(rng.standard_normal((21, 1280)).astype(np.float32))
    results = {}
    for path in paths:
        lib.kquant_set_path(PATHS[path])
        results[path] = w.gemm(act)
    lib.kquant_set_path(0)
    for path in paths:
        assert np.array_equal(results[path], results["scalar"]), path


@pytest.mark.parametrize("kind", TYPES)
def test_is_batch_invariant(lib, kind):
    """A column's bits are the same whatever N is (1..16 and beyond) and however the rows are split."""
    rng = np.random.default_rng(4)
    M, K = 100, 1024
    w = Packed(lib, kind, random_blocks(rng, kind, M, K), K)
    act = w.prepare(rng.standard_normal((20, K)).astype(np.float32))
    splits = [[0, M], [0, 48, M], [0, 16, 32, 96, M], [0, 16, 32, 48, 64, 80, 96, M],
              [0, 32, 64, 80, M], [0, 80, M], [0, 16, 48, 64, 96, M]]  # 1 to 7 threads' shares
    for path in available(lib):
        lib.kquant_set_path(PATHS[path])
        alone = np.stack([w.gemm(np.ascontiguousarray(act[j:j + 1]))[0] for j in range(20)])
        for n in list(range(1, 17)) + [20]:
            got = w.gemm(np.ascontiguousarray(act[:n]), splits[n % len(splits)])
            assert np.array_equal(got, alone[:n]), (path, n)
    lib.kquant_set_path(0)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 build")
def test_avx2_kernels_use_no_vnni_instruction(kernel_so):
    """The AVX2 and AVX-VNNI kernels compile from one template with AVX-VNNI allowed: a VNNI instruction in an
    AVX2 instance would fault on Zen 3."""
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("needs objdump")
    listing = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", str(kernel_so)], capture_output=True,
                             text=True, check=True).stdout
    functions, name = {}, ""
    for line in listing.splitlines():
        if line.endswith(">:"):
            name = line
            functions[name] = []
        elif name:
            functions[name].append(line)
    vnni_argument = {n: re.search(r"_avx256<\d+, (true|false)", n) for n in functions}  # <columns, VNNI, ...>
    avx2 = [n for n, m in vnni_argument.items() if m and m.group(1) == "false"]
    vnni = [n for n, m in vnni_argument.items() if m and m.group(1) == "true"]
    assert len(avx2) == 12 and len(vnni) == 12, list(functions)[:20]
    for n in avx2:
        assert not any("vpdp" in line for line in functions[n]), n
    for n in vnni:
        assert any("vpdpbusd" in line for line in functions[n]), n
