"""Make a random-weight Hugging Face checkpoint of any shape: for conversion throughput (speed does not
depend on weight values) and for the tiny checkpoints tests build.

    python -m converters.random_checkpoint OUT --hidden 2048 --layers 22 --intermediate 5632

Tensors are generated and written one at a time, so a 2 GB checkpoint needs little memory.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np

from converters.encodings import as_bf16_bits
from converters.safetensors_file import write_safetensors

DEMO_TOKENIZER = Path(__file__).resolve().parent.parent / "assistant" / "demo" / "target"
HF_ARCHITECTURES = {
    "llama": ("LlamaForCausalLM", "llama"), "mistral": ("MistralForCausalLM", "mistral"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"), "qwen3": ("Qwen3ForCausalLM", "qwen3"),
}


def make_config(arch: str, hidden: int, layers: int, intermediate: int, heads: int, kv_heads: int, vocab: int,
                tied: bool, bias: bool, head_dim: int | None = None, **overrides) -> dict:
    hf_name, model_type = HF_ARCHITECTURES[arch]
    config = {
        "architectures": [hf_name], "model_type": model_type, "hidden_size": hidden, "num_hidden_layers": layers,
        "intermediate_size": intermediate, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "vocab_size": vocab, "tie_word_embeddings": tied, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096, "rope_theta": 10000.0, "torch_dtype": "bfloat16", "dtype": "bfloat16",
        "bos_token_id": None, "eos_token_id": None, "initializer_range": 0.02, "use_cache": True,
    }
    if arch in ("llama", "qwen3"):
        config["attention_bias"] = bias
    if arch == "llama":
        config["mlp_bias"] = False
    if arch in ("mistral", "qwen2", "qwen3"):
        config["sliding_window"] = None
        config["use_sliding_window"] = False
    if head_dim is not None or arch == "qwen3":
        config["head_dim"] = head_dim or hidden // heads
    config.update(overrides)
    return config


def tensor_specs(config: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Hugging Face names and shapes of every tensor the config implies."""
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    model_type = config["model_type"]
    bias = model_type == "qwen2" or config.get("attention_bias", False)
    specs = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        specs.append((p + "input_layernorm.weight", (hidden,)))
        for proj, rows in (("q", heads * head_dim), ("k", kv_heads * head_dim), ("v", kv_heads * head_dim)):
            specs.append((p + f"self_attn.{proj}_proj.weight", (rows, hidden)))
            if bias:
                specs.append((p + f"self_attn.{proj}_proj.bias", (rows,)))
        specs.append((p + "self_attn.o_proj.weight", (hidden, heads * head_dim)))
        if bias and model_type != "qwen2":
            specs.append((p + "self_attn.o_proj.bias", (hidden,)))
        if model_type == "qwen3":
            specs += [(p + "self_attn.q_norm.weight", (head_dim,)), (p + "self_attn.k_norm.weight", (head_dim,))]
        specs.append((p + "post_attention_layernorm.weight", (hidden,)))
        specs += [(p + "mlp.gate_proj.weight", (inter, hidden)), (p + "mlp.up_proj.weight", (inter, hidden)),
                  (p + "mlp.down_proj.weight", (hidden, inter))]
    specs.append(("model.norm.weight", (hidden,)))
    if not config.get("tie_word_embeddings", False):
        specs.append(("lm_head.weight", (vocab, hidden)))
    return specs


def random_weights(seed: int = 0, std: float = 0.02):
    """A make() for write_bf16_tensors: norms near 1, everything else normal(0, std)."""
    rng = np.random.default_rng(seed)

    def make(name: str, shape) -> np.ndarray:
        if "norm" in name:
            return as_bf16_bits(1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32))
        rows = []  # row blocks keep the float32 temporary small for huge tensors
        step = max(1, (1 << 22) // int(np.prod(shape[1:], dtype=np.int64) or 1))
        for start in range(0, shape[0], step):
            block = (shape[0] if len(shape) == 1 else min(step, shape[0] - start),) + tuple(shape[1:])
            rows.append(as_bf16_bits(std * rng.standard_normal(block, dtype=np.float32)))
            if len(shape) == 1:
                break
        return np.concatenate(rows) if len(rows) > 1 else rows[0]

    return make


def write_bf16_tensors(path: Path, specs, make) -> None:
    """specs: [(name, shape)] of BF16 tensors; make(name, shape) -> their uint16 bits, called in order."""
    write_safetensors(path, [(name, "BF16", tuple(shape)) for name, shape in specs],
                      (make(name, shape) for name, shape in specs))


def make_checkpoint(outdir, arch: str = "qwen2", hidden: int = 64, layers: int = 2, intermediate: int = 128,
                    heads: int = 4, kv_heads: int = 2, vocab: int = 8192, tied: bool = False, bias: bool = False,
                    head_dim: int | None = None, seed: int = 0, std: float = 0.02,
                    tokenizer_dir: Path | None = DEMO_TOKENIZER, **overrides) -> Path:
    """Write config.json, model.safetensors and (copied from ``tokenizer_dir``) the tokenizer files."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    config = make_config(arch, hidden, layers, intermediate, heads, kv_heads, vocab, tied, bias, head_dim, **overrides)
    if tokenizer_dir is not None:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(Path(tokenizer_dir) / name, outdir / name)
        special = json.loads((Path(tokenizer_dir) / "config.json").read_text()) if (Path(tokenizer_dir) / "config.json").exists() else {}
        for key in ("bos_token_id", "eos_token_id"):
            if key in special and key not in overrides:
                config[key] = special[key]
    (outdir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_bf16_tensors(outdir / "model.safetensors", tensor_specs(config), random_weights(seed, std))
    return outdir


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--arch", choices=sorted(HF_ARCHITECTURES), default="qwen2")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=22)
    parser.add_argument("--intermediate", type=int, default=5632)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192, help="must cover the tokenizer (the demo one has 8192)")
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = make_checkpoint(args.outdir, args.arch, args.hidden, args.layers, args.intermediate, args.heads,
                           args.kv_heads, args.vocab, args.tied, seed=args.seed)
    size = (path / "model.safetensors").stat().st_size
    print(f"wrote {path} ({size / 1e9:.2f} GB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
