"""Our attention (native/src/attention.cpp), compiled on its own and checked against a float64 reference.

What speculative decoding needs of it: a query's result has the same bits whether it is computed alone (one
token a step) or with the other queries of a verification batch, and whatever the thread split. Checked on
awkward shapes: grouped-query heads, causal masks, ALiBi, soft-capping, sink logits, head sizes that are not
a multiple of 16 or of 8, and masked cells that hold NaN.
"""

from __future__ import annotations

import ctypes
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

SRC = Path(__file__).resolve().parents[1] / "native" / "src" / "attention.cpp"
PATHS = {"scalar": 1, "avx2": 2, "avx512": 3}
BASELINE_FLAGS = ["-march=x86-64", "-mtune=generic"] if platform.machine() == "x86_64" else []

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

c_i64, c_size, c_float, c_void = ctypes.c_int64, ctypes.c_size_t, ctypes.c_float, ctypes.c_void_p


class Problem(ctypes.Structure):
    _fields_ = [("dk", c_i64), ("dv", c_i64), ("n_kv", c_i64), ("n_query", c_i64), ("n_head", c_i64),
                ("n_head_kv", c_i64),
                ("q", c_void), ("q_query_stride", c_size), ("q_head_stride", c_size),
                ("k", c_void), ("k_cell_stride", c_size), ("k_head_stride", c_size),
                ("v", c_void), ("v_cell_stride", c_size), ("v_head_stride", c_size),
                ("mask", c_void), ("mask_query_stride", c_size), ("mask_plane_stride", c_size), ("mask_planes", c_i64),
                ("sinks", c_void), ("scale", c_float), ("max_bias", c_float), ("softcap", c_float),
                ("out", c_void), ("out_query_stride", c_size), ("out_head_stride", c_size)]


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> ctypes.CDLL:
    """Built as the native build builds it: for the baseline CPU, faster paths chosen at run time."""
    out = tmp_path_factory.mktemp("attention") / "attention.so"
    subprocess.run(["c++", "-O3", *BASELINE_FLAGS, "-std=c++17", "-shared", "-fPIC", "-w", "-o", str(out), str(SRC)],
                   check=True)
    lib = ctypes.CDLL(str(out))
    lib.attention_set_path.argtypes = [ctypes.c_int]
    lib.attention_path_name.restype = ctypes.c_char_p
    lib.attention_scratch_bytes.restype = c_size
    lib.attention_scratch_bytes.argtypes = [ctypes.POINTER(Problem)]
    lib.attention_compute.argtypes = [ctypes.POINTER(Problem), ctypes.c_int, ctypes.c_int, c_void]
    return lib


def available_paths(lib) -> list[str]:
    found = [name for name, value in PATHS.items() if lib.attention_set_path(value) == value]
    lib.attention_set_path(0)
    return found


class Case:
    """Random queries, an f16 cache and an f16 mask laid out as llama.cpp lays them out for flash attention."""

    def __init__(self, seed=0, dk=64, dv=64, n_kv=150, n_query=9, n_head=6, n_head_kv=2, causal=True,
                 max_bias=0.0, softcap=0.0, sinks=False, mask_planes=1, nan_in_masked=False):
        rng = np.random.default_rng(seed)
        self.shape = (dk, dv, n_kv, n_query, n_head, n_head_kv)
        self.q = rng.standard_normal((n_head, n_query, dk)).astype(np.float32)  # head-major, as ggml's permuted view
        self.k = (rng.standard_normal((n_head_kv, n_kv, dk)) * 0.5).astype(np.float16)
        self.v = rng.standard_normal((n_head_kv, n_kv, dv)).astype(np.float16)
        mask = np.zeros((mask_planes, n_query, n_kv), dtype=np.float16)
        if causal:  # the queries are the last n_query cells
            for i in range(n_query):
                mask[:, i, n_kv - n_query + i + 1:] = -np.inf
        if max_bias:
            mask += rng.standard_normal(mask.shape).astype(np.float16) * 0.1
        self.mask = mask
        if nan_in_masked and causal:
            self.k[:, -1, :] = np.nan  # the last cell: masked for every query but the last
            self.v[:, -1, :] = np.nan
        self.sinks = rng.standard_normal(n_head).astype(np.float32) if sinks else None
        self.scale, self.max_bias, self.softcap = 1.0 / np.sqrt(dk), max_bias, softcap

    def run(self, lib, queries=None, nth=1) -> np.ndarray:
        """The result (n_query, n_head, dv) for ``queries`` (a slice of the queries; default all)."""
        dk, dv, n_kv, n_query, n_head, n_head_kv = self.shape
        queries = queries or slice(0, n_query)
        q = np.ascontiguousarray(self.q[:, queries])
        mask = np.ascontiguousarray(self.mask[:, queries])
        n = q.shape[1]
        out = np.full((n, n_head, dv), np.nan, dtype=np.float32)
        p = Problem(dk, dv, n_kv, n, n_head, n_head_kv,
                    q.ctypes.data, q.strides[1], q.strides[0],
                    self.k.ctypes.data, self.k.strides[1], self.k.strides[0],
                    self.v.ctypes.data, self.v.strides[1], self.v.strides[0],
                    mask.ctypes.data, mask.strides[1], mask.strides[0], mask.shape[0],
                    self.sinks.ctypes.data if self.sinks is not None else None,
                    self.scale, self.max_bias, self.softcap,
                    out.ctypes.data, out.strides[0], out.strides[1])
        scratch = [ctypes.create_string_buffer(lib.attention_scratch_bytes(ctypes.byref(p))) for _ in range(nth)]
        for ith in range(nth):
            lib.attention_compute(ctypes.byref(p), ith, nth, scratch[ith])
        return out

    def reference(self) -> np.ndarray:
        dk, dv, n_kv, n_query, n_head, n_head_kv = self.shape
        group = n_head // n_head_kv
        out = np.zeros((n_query, n_head, dv))
        base = 2 ** int(np.floor(np.log2(n_head)))
        for h in range(n_head):
            slope = 1.0
            if self.max_bias > 0:
                m0, m1 = 2 ** (-self.max_bias / base), 2 ** (-self.max_bias / 2 / base)
                slope = m0 ** (h + 1) if h < base else m1 ** (2 * (h - base) + 1)
            k = self.k[h // group].astype(np.float64)
            v = self.v[h // group].astype(np.float64)
            for i in range(n_query):
                bias = slope * self.mask[h % self.mask.shape[0], i].astype(np.float64)
                live = np.isfinite(bias)
                s = k[live] @ self.q[h, i].astype(np.float64) * self.scale
                if self.softcap:
                    s = self.softcap * np.tanh(s / self.softcap)
                s = s + bias[live]
                extra = [float(self.sinks[h])] if self.sinks is not None else []
                if not live.any() and not extra:
                    continue  # nothing attended: zero
                top = max(list(s) + extra)
                w = np.exp(s - top)
                total = w.sum() + sum(np.exp(x - top) for x in extra)
                out[i, h] = (w @ v[live]) / total
        return out


CASES = {
    "grouped heads, causal": {},
    "head size 72 (an odd number of 8-value chunks)": {"dk": 72, "dv": 72},
    "head size 68 (a tail past the chunks)": {"dk": 68, "dv": 68},
    "head size 256, one KV head": {"dk": 256, "dv": 256, "n_head": 4, "n_head_kv": 1, "n_kv": 300},
    "ALiBi, a mask per head": {"max_bias": 8.0, "mask_planes": 6, "n_head": 6, "n_head_kv": 6},
    "soft-capped scores": {"softcap": 30.0},
    "sink logits": {"sinks": True},
    "NaN in masked cells": {"nan_in_masked": True},
    "no mask, long cache": {"causal": False, "n_kv": 700},
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_the_float64_reference_on_every_path(lib, name):
    case = Case(**CASES[name])
    want = case.reference()
    results = {}
    for path in available_paths(lib):
        lib.attention_set_path(PATHS[path])
        results[path] = case.run(lib, nth=3)
        np.testing.assert_allclose(results[path], want, rtol=2e-4, atol=2e-5, err_msg=path)
    lib.attention_set_path(0)
    for path, got in results.items():  # one fixed order of operations: the same bits on every path
        assert np.array_equal(got.view(np.uint32), results["scalar"].view(np.uint32)), path


@pytest.mark.parametrize("name", list(CASES))
def test_a_query_has_the_same_bits_alone_as_in_any_batch_and_split(lib, name):
    case = Case(**CASES[name])
    batch = case.run(lib, nth=2)
    n_query = case.shape[3]
    for i in range(n_query):
        alone = case.run(lib, queries=slice(i, i + 1), nth=2)
        assert np.array_equal(alone[0].view(np.uint32), batch[i].view(np.uint32)), f"query {i}"
    for nth in (1, 3, 4, 7):
        assert np.array_equal(case.run(lib, nth=nth).view(np.uint32), batch.view(np.uint32)), f"{nth} threads"
    pair = case.run(lib, queries=slice(n_query - 2, n_query), nth=1)
    assert np.array_equal(pair.view(np.uint32), batch[-2:].view(np.uint32))


def test_a_row_attending_nothing_is_zero(lib):
    case = Case(causal=False, n_query=2)
    case.mask[:, 0, :] = -np.inf
    out = case.run(lib, nth=2)
    assert np.all(out[0] == 0.0)
    np.testing.assert_allclose(out[1], case.reference()[1], rtol=2e-4, atol=2e-5)


def test_the_fastest_path_this_cpu_runs_is_the_default(lib):
    paths = available_paths(lib)
    lib.attention_set_path(0)
    assert lib.attention_path_name().decode() == paths[-1]
