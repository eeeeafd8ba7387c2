"""Our K-quant kernels inside llama.cpp, on a tiny random model quantized to Q4_K_M (ollama's default file type)
and Q5_K_M by our build's llama-quantize: batch equals token by token, and logits close to stock's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest

from tests.test_native_llama import OURS, STOCK, _description, prompt_tokens, run_logits  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(not _description(), reason="llama_cpp with our kernels is not installed")


@pytest.fixture(scope="module")
def tiny_bf16(tmp_path_factory) -> Path:
    """A Qwen2 of 2 layers, hidden 256 (rows of whole 256-value super-blocks), untied output, as BF16."""
    from converters import convert
    from converters.random_checkpoint import make_checkpoint

    directory = tmp_path_factory.mktemp("k_quants")
    checkpoint = make_checkpoint(directory / "hf", "qwen2", hidden=256, layers=2, intermediate=768, heads=4,
                                 kv_heads=2, tied=False, bias=True, seed=11, std=0.05)
    return convert(checkpoint, outdir=directory, name="tiny", types=("bf16",), progress=False)["bf16"]


def quantized(source: Path, file_type: str) -> Path:
    """``source`` quantized by our build's llama-quantize."""
    from native import build

    quantize = build.cache_root() / build.build_key() / "bin" / "llama-quantize"
    if not quantize.exists():
        pytest.skip(f"no llama-quantize for the current sources ({quantize}); run native/build.py")
    out = source.with_name(f"tiny.{file_type}.gguf")
    done = subprocess.run([str(quantize), str(source), str(out), file_type], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def q4_k_m(tiny_bf16) -> Path:
    return quantized(tiny_bf16, "Q4_K_M")


@pytest.fixture(scope="module")
def q5_k_m(tiny_bf16) -> Path:
    return quantized(tiny_bf16, "Q5_K_M")


def test_the_files_hold_k_quant_matrices(q4_k_m, q5_k_m):
    for path, expected in ((q4_k_m, {"Q4_K", "Q6_K"}), (q5_k_m, {"Q5_K", "Q6_K"})):
        types = {t.tensor_type.name for t in gguf.GGUFReader(path).tensors if len(t.shape) == 2}
        assert types == expected, (path.name, types)


def test_q5_k_m_batch_equals_token_by_token(q5_k_m, prompt_tokens, tmp_path):
    batch, info = run_logits(q5_k_m, prompt_tokens[:16], OURS, tmp_path)
    single, _ = run_logits(q5_k_m, prompt_tokens[:16], OURS, tmp_path, single=True)
    assert "kquant=stock" not in info["kernels"]
    assert np.array_equal(batch, single), np.abs(batch - single).max()
    stock, _ = run_logits(q5_k_m, prompt_tokens[:16], STOCK, tmp_path)
    assert np.median(np.abs(batch - stock) / stock.std(axis=1, keepdims=True)) < 5e-2


def test_kernels_claim_the_k_quants(q4_k_m, tmp_path):
    _, ours = run_logits(q4_k_m, [300, 301], OURS, tmp_path)
    _, stock = run_logits(q4_k_m, [300, 301], dict(OURS, ASSISTANT_KQUANT_KERNEL="stock"), tmp_path)
    _, forced = run_logits(q4_k_m, [300, 301], dict(OURS, ASSISTANT_KQUANT_KERNEL="avx2"), tmp_path)
    assert "kquant=stock" not in ours["kernels"] and "kquant=stock" in stock["kernels"]
    assert "kquant=avx2" in forced["kernels"] or "kquant=neon" in ours["kernels"]


@pytest.mark.parametrize("path", ["auto", "avx2", "scalar"])
def test_batch_equals_token_by_token(q4_k_m, prompt_tokens, tmp_path, path):
    """A 16-token batch gives the logits of decoding them one at a time, bit for bit; and the greedy tokens
    generated one at a time are what a batch of prompt + those tokens predicts (lossless verification)."""
    env = dict(OURS, ASSISTANT_KQUANT_KERNEL=path)
    batch, info = run_logits(q4_k_m, prompt_tokens[:16], env, tmp_path, greedy=12)
    if path != "auto" and f"kquant={path}" not in info["kernels"]:
        pytest.skip(f"this CPU does not run the {path} path")
    single, _ = run_logits(q4_k_m, prompt_tokens[:16], env, tmp_path, single=True)
    assert np.array_equal(batch, single), np.abs(batch - single).max()
    greedy = info["greedy"]
    verified, _ = run_logits(q4_k_m, prompt_tokens[:16] + greedy[:-1], env, tmp_path)
    assert [int(t) for t in verified[15:].argmax(axis=1)] == greedy


@pytest.fixture(scope="module")
def dequantized(q4_k_m) -> Path:
    """The same weights dequantized to F32 by llama-quantize: the reference without activation quantization."""
    from native import build

    out = q4_k_m.with_suffix(".f32.gguf")
    quantize = build.cache_root() / build.build_key() / "bin" / "llama-quantize"
    done = subprocess.run([str(quantize), "--allow-requantize", str(q4_k_m), str(out), "F32"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_logits_match_the_stock_kernels(q4_k_m, dequantized, prompt_tokens, tmp_path):
    """Stock quantizes activations to Q8_K (one scale per 256 values), ours to int8 per 32: the two agree
    closely, and ours is no farther than stock from the same weights run in F32."""
    ours, _ = run_logits(q4_k_m, prompt_tokens, OURS, tmp_path)
    stock, _ = run_logits(q4_k_m, prompt_tokens, STOCK, tmp_path)
    exact, _ = run_logits(dequantized, prompt_tokens, STOCK, tmp_path)
    spread = stock.std(axis=1, keepdims=True)
    assert np.median(np.abs(ours - stock) / spread) < 5e-2
    assert np.abs(ours - stock).max() / spread.min() < 0.5
    rms = {name: np.sqrt(np.mean((x - exact) ** 2)) for name, x in (("ours", ours), ("stock", stock))}
    assert rms["ours"] <= rms["stock"], rms
    assert (ours.argmax(axis=1) == exact.argmax(axis=1)).mean() >= 0.9


def test_our_k_quant_mul_mat_is_batch_invariant_in_ggml():
    """Through the real backend (the kernel bench's check): each column of N = 1, 3, 8, 16 at 1 and 2 threads
    has the bits of that column computed alone."""
    from native import bench, build

    directory = build.cache_root() / build.build_key()
    if not (directory / "build-info.json").exists():
        pytest.skip(f"no native build for the current sources ({directory}); run native/build.py")
    result = bench.check_invariance(bench.mulmat_tool(directory), kernels=("q4_k-ours", "q5_k-ours", "q6_k-ours"))
    assert set(result) == {"q4_k-ours", "q5_k-ours", "q6_k-ours"}
    assert all(r["batch_invariant"] for r in result.values()), result
