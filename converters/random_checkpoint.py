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
    "gemma": ("GemmaForCausalLM", "gemma"), "gemma2": ("Gemma2ForCausalLM", "gemma2"),
    "gemma3": ("Gemma3ForCausalLM", "gemma3_text"), "phi3": ("Phi3ForCausalLM", "phi3"),
    "granite": ("GraniteForCausalLM", "granite"), "starcoder2": ("Starcoder2ForCausalLM", "starcoder2"),
}
ALWAYS_TIED = ("gemma", "gemma2")  # llama.cpp reads their output head from the embeddings
# each family's own keys, as its released configs give them (values sized for tiny checkpoints)
FAMILY_CONFIG = {
    "llama": {"attention_bias": False, "mlp_bias": False},
    "mistral": {"sliding_window": None},
    "qwen2": {"sliding_window": None, "use_sliding_window": False},
    "qwen3": {"attention_bias": False, "sliding_window": None, "use_sliding_window": False},
    "gemma": {"hidden_act": "gelu_pytorch_tanh", "pad_token_id": None},
    "gemma2": {"hidden_activation": "gelu_pytorch_tanh", "pad_token_id": None, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0, "sliding_window": 4096},
    "gemma3": {"hidden_activation": "gelu_pytorch_tanh", "pad_token_id": None, "sliding_window": 512,
               "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "final_logit_softcapping": None,
               "attn_logit_softcapping": None},
    "phi3": {"original_max_position_embeddings": 4096, "sliding_window": None, "pad_token_id": None,
             "rms_norm_eps": 1e-5},
    "granite": {"attention_bias": False, "mlp_bias": False, "embedding_multiplier": 12.0,
                "residual_multiplier": 0.22, "attention_multiplier": 0.0625, "logits_scaling": 8.0},
    "starcoder2": {"use_bias": True, "norm_epsilon": 1e-5, "hidden_act": "gelu_pytorch_tanh", "sliding_window": None,
                   "residual_dropout": 0.0, "embedding_dropout": 0.0},
}
HEAD_DIM_IN_CONFIG = ("qwen3", "gemma", "gemma2", "gemma3")


def make_config(arch: str, hidden: int, layers: int, intermediate: int, heads: int, kv_heads: int, vocab: int,
                tied: bool, bias: bool, head_dim: int | None = None, **overrides) -> dict:
    hf_name, model_type = HF_ARCHITECTURES[arch]
    config = {
        "architectures": [hf_name], "model_type": model_type, "hidden_size": hidden, "num_hidden_layers": layers,
        "intermediate_size": intermediate, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "vocab_size": vocab, "tie_word_embeddings": tied or arch in ALWAYS_TIED, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
        "dtype": "bfloat16", "bos_token_id": None, "eos_token_id": None, "initializer_range": 0.02, "use_cache": True,
        **FAMILY_CONFIG[arch],
    }
    if arch in ("llama", "qwen3", "granite"):
        config["attention_bias"] = bias
    if head_dim is not None or arch in HEAD_DIM_IN_CONFIG:
        config["head_dim"] = head_dim or hidden // heads
    if arch in ("gemma2", "gemma3"):
        config["query_pre_attn_scalar"] = config["head_dim"]
    config.update(overrides)
    return config


def _attention(prefix: str, config: dict, q: int, kv: int, bias: bool, out_bias: bool) -> list:
    hidden = config["hidden_size"]
    if config["model_type"] == "phi3":
        return [(prefix + "qkv_proj.weight", (q + 2 * kv, hidden)), (prefix + "o_proj.weight", (hidden, q))]
    specs = []
    for proj, rows in (("q", q), ("k", kv), ("v", kv)):
        specs.append((prefix + f"{proj}_proj.weight", (rows, hidden)))
        if bias:
            specs.append((prefix + f"{proj}_proj.bias", (rows,)))
    specs.append((prefix + "o_proj.weight", (hidden, q)))
    if out_bias:
        specs.append((prefix + "o_proj.bias", (hidden,)))
    return specs


def _feed_forward(prefix: str, config: dict) -> list:
    hidden, inter, model_type = config["hidden_size"], config["intermediate_size"], config["model_type"]
    if model_type == "phi3":
        return [(prefix + "gate_up_proj.weight", (2 * inter, hidden)), (prefix + "down_proj.weight", (hidden, inter))]
    if model_type == "starcoder2":
        return [(prefix + "c_fc.weight", (inter, hidden)), (prefix + "c_fc.bias", (inter,)),
                (prefix + "c_proj.weight", (hidden, inter)), (prefix + "c_proj.bias", (hidden,))]
    specs = []
    for proj, shape in (("gate", (inter, hidden)), ("up", (inter, hidden)), ("down", (hidden, inter))):
        specs.append((prefix + f"{proj}_proj.weight", shape))
        if config.get("mlp_bias"):
            specs.append((prefix + f"{proj}_proj.bias", shape[:1]))
    return specs


def _norm(name: str, config: dict, size: int) -> list:
    if config["model_type"] == "starcoder2":  # LayerNorm
        return [(name + ".weight", (size,)), (name + ".bias", (size,))]
    return [(name + ".weight", (size,))]


def tensor_specs(config: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Hugging Face names and shapes of every tensor the config implies."""
    hidden, vocab, model_type = config["hidden_size"], config["vocab_size"], config["model_type"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    gemma2_block = model_type in ("gemma2", "gemma3_text")
    qkv_bias = model_type == "qwen2" or config.get("attention_bias", False) or (
        model_type == "starcoder2" and config.get("use_bias"))
    out_bias = qkv_bias and model_type != "qwen2"
    specs = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        specs += _norm(p + "input_layernorm", config, hidden)
        specs += _attention(p + "self_attn.", config, heads * head_dim, kv_heads * head_dim, qkv_bias, out_bias)
        if model_type in ("qwen3", "gemma3_text"):
            specs += [(p + "self_attn.q_norm.weight", (head_dim,)), (p + "self_attn.k_norm.weight", (head_dim,))]
        specs += _norm(p + "post_attention_layernorm", config, hidden)
        if gemma2_block:
            specs.append((p + "pre_feedforward_layernorm.weight", (hidden,)))
        specs += _feed_forward(p + "mlp.", config)
        if gemma2_block:
            specs.append((p + "post_feedforward_layernorm.weight", (hidden,)))
    specs += _norm("model.norm", config, hidden)
    if not config.get("tie_word_embeddings", False):
        specs.append(("lm_head.weight", (vocab, hidden)))
    return specs


def random_weights(seed: int = 0, std: float = 0.02):
    """A make() for write_bf16_tensors: norms near 1, everything else normal(0, std)."""
    rng = np.random.default_rng(seed)

    def make(name: str, shape) -> np.ndarray:
        if "norm" in name and name.endswith(".weight"):
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
