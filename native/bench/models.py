"""Random-weight Qwen2-shaped GGUF models for llama-bench: memory-bound timings need weights larger than L3.

Speed does not depend on weight values, so every layer reuses the same random matrices (each copy still
lives in its own memory). The vocabulary is a placeholder SPM list; llama-bench never detokenizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from converters.encodings import as_bf16_bits


@dataclass(frozen=True)
class Shape:
    """Default: ~1.1B parameters (TinyLlama-like proportions, Qwen2 architecture), 2.2 GB in BF16."""

    hidden: int = 2048
    layers: int = 22
    intermediate: int = 5632
    heads: int = 32
    kv_heads: int = 4
    vocab: int = 32000

    @property
    def name(self) -> str:
        return f"qwen2-h{self.hidden}-l{self.layers}-f{self.intermediate}-v{self.vocab}"


# Qwen2.5-1.5B's shape: its Q4_K_M file (ollama's default type) is the K-quant kernels' benchmark (issue 51).
QWEN25_1_5B = Shape(hidden=1536, layers=28, intermediate=8960, heads=12, kv_heads=2, vocab=151936)


def quantized(source: Path, file_type: str, bin_dir: Path) -> Path:
    """``source`` re-quantized by our build's llama-quantize (e.g. "Q4_K_M": Q4_K matrices, Q6_K for the output
    and some attn_v / ffn_down), beside it; made once."""
    import subprocess

    out = source.with_name(source.name.replace(".bf16.gguf", f".{file_type}.gguf"))
    if out.exists():
        return out
    partial = out.with_suffix(".part")
    subprocess.run([str(bin_dir / "llama-quantize"), str(source), str(partial), file_type], check=True,
                   capture_output=True)
    partial.rename(out)
    return out


def _bf16(rng, rows: int, cols: int) -> np.ndarray:
    return as_bf16_bits(rng.standard_normal((rows, cols), dtype=np.float32) * 0.02)


def _mxfp4(rng, rows: int, cols: int) -> np.ndarray:
    blocks = rng.integers(0, 256, size=(rows, cols // 32, 17), dtype=np.uint8)
    blocks[:, :, 0] = rng.integers(117, 121, size=(rows, cols // 32), dtype=np.uint8)  # scales ~ 2^-9
    return blocks.reshape(rows, cols // 32 * 17)


def random_qwen2(path: Path, weight_type: str, shape: Shape = Shape(), seed: int = 0) -> Path:
    """Write a Qwen2 GGUF whose 2-D weights are ``weight_type`` ("bf16" or "mxfp4"); norms and biases F32."""
    import gguf

    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    qtype = gguf.GGMLQuantizationType.MXFP4 if weight_type == "mxfp4" else gguf.GGMLQuantizationType.BF16
    make = _mxfp4 if weight_type == "mxfp4" else _bf16
    kv_dim = shape.hidden // shape.heads * shape.kv_heads
    cache: dict[tuple[int, int], np.ndarray] = {}

    def matrix(rows: int, cols: int) -> np.ndarray:
        if (rows, cols) not in cache:
            cache[(rows, cols)] = make(rng, rows, cols)
        return cache[(rows, cols)]

    partial = path.with_suffix(".part")
    w = gguf.GGUFWriter(str(partial), "qwen2")
    w.add_name(shape.name)
    w.add_block_count(shape.layers)
    w.add_context_length(4096)
    w.add_embedding_length(shape.hidden)
    w.add_feed_forward_length(shape.intermediate)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if weight_type == "bf16" else gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    tokens = [f"<0x{i:02X}>".encode() for i in range(256)] + [f"t{i}".encode() for i in range(shape.vocab - 256)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * shape.vocab)
    w.add_token_types([gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (shape.vocab - 256))
    w.add_bos_token_id(256)
    w.add_eos_token_id(257)

    def add(name: str, data: np.ndarray) -> None:
        w.add_tensor(name, data, raw_dtype=None if data.dtype == np.float32 else qtype)

    ones = np.ones(shape.hidden, dtype=np.float32)
    add("token_embd.weight", matrix(shape.vocab, shape.hidden))
    for i in range(shape.layers):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", ones)
        add(p + "attn_q.weight", matrix(shape.hidden, shape.hidden))
        add(p + "attn_q.bias", np.zeros(shape.hidden, dtype=np.float32))
        add(p + "attn_k.weight", matrix(kv_dim, shape.hidden))
        add(p + "attn_k.bias", np.zeros(kv_dim, dtype=np.float32))
        add(p + "attn_v.weight", matrix(kv_dim, shape.hidden))
        add(p + "attn_v.bias", np.zeros(kv_dim, dtype=np.float32))
        add(p + "attn_output.weight", matrix(shape.hidden, shape.hidden))
        add(p + "ffn_norm.weight", ones)
        add(p + "ffn_gate.weight", matrix(shape.intermediate, shape.hidden))
        add(p + "ffn_up.weight", matrix(shape.intermediate, shape.hidden))
        add(p + "ffn_down.weight", matrix(shape.hidden, shape.intermediate))
    add("output_norm.weight", ones)
    add("output.weight", matrix(shape.vocab + 0, shape.hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    partial.rename(path)
    return path
