"""Pad a Hugging Face checkpoint with zero-output capacity: a bigger model that computes the same function.

Speed does not depend on weight values, acceptance ratios do. To time a trained pair in the memory-bound
regime we make it bigger without changing what it says: extra decoder layers whose output projections
(o_proj, down_proj) are zero add exactly 0 to the residual stream; extra feed-forward neurons whose
down_proj columns are zero add 0; extra attention heads, appended as whole GQA groups (one new KV head
and its query heads) with zero o_proj columns, add 0 (transformers runs such a checkpoint; llama.cpp's
Qwen2 graph does not, as it assumes query width = hidden size). New input-side weights are random at the scale of
the real ones, so activations stay finite and the kernels do realistic work. Real weights are copied
bit for bit.

    python -m assistant.bench.padding SRC_DIR OUT_DIR --layers 28 --intermediate 18432

A benchmark tool (workload b of `assistant bench`). Reads and writes safetensors through the converter's
reader and writer (BF16 as raw 16-bit words), streaming tensor by tensor, so padding to gigabytes needs little
memory.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np

from assistant.errors import AssistantError
from converters import encodings
from converters.safetensors_file import SUPPORTED_DTYPES, read_tensors, write_safetensors

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")
LAYER_NAME = re.compile(r"^model\.layers\.(\d+)\.(.+)$")

class PaddingError(AssistantError):
    """Bad input to the padding tool; the message names the file, tensor or option. An AssistantError, so
    `assistant bench` shows it as one line, not a traceback."""


# --- values -----------------------------------------------------------------------------------------


def random_like(rng: np.random.Generator, dtype: str, real: np.ndarray, shape) -> np.ndarray:
    """Random values with the mean and spread of ``real`` (a tensor of the same kind)."""
    values = encodings.as_float32(real)
    mean, std = float(values.mean()), float(values.std()) or 0.02
    made = rng.standard_normal(shape, dtype=np.float32) * std + mean
    return encodings.as_bf16_bits(made) if dtype == "BF16" else made.astype(SUPPORTED_DTYPES[dtype])


# --- the plan ---------------------------------------------------------------------------------------


def _check_config(config: dict, layers: int, intermediate: int, heads: int) -> dict:
    """The grown dimensions, validated; raises PaddingError on anything that would change the outputs."""
    if config.get("model_type") not in SUPPORTED:
        raise PaddingError(f"model_type {config.get('model_type')!r} is not supported (supported: {', '.join(SUPPORTED)})")
    n_layers, n_ff = config["num_hidden_layers"], config["intermediate_size"]
    n_heads = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads") or n_heads
    head_dim = config.get("head_dim") or config["hidden_size"] // n_heads
    for option, new, old in (("--layers", layers, n_layers), ("--intermediate", intermediate, n_ff), ("--heads", heads, n_heads)):
        if new < old:
            raise PaddingError(f"{option} {new} is smaller than the checkpoint's {old}; padding only grows")
    group = n_heads // n_kv
    if heads % group:
        raise PaddingError(f"--heads {heads} must be a multiple of {group} (query heads per KV head), so new heads come in whole GQA groups")
    return {"layers": (n_layers, layers), "ff": (n_ff, intermediate), "heads": (n_heads, heads),
            "kv": (n_kv, heads // group), "head_dim": head_dim}


def _grow(kind: str, shape: tuple[int, ...], dims: dict) -> tuple[tuple[int, ...], str | None]:
    """New shape of a layer tensor and how its new part is filled: 'random', 'zero' or None (unchanged)."""
    d = dims["head_dim"]
    q_rows, kv_rows = dims["heads"][1] * d, dims["kv"][1] * d
    rows = {"self_attn.q_proj": q_rows, "self_attn.k_proj": kv_rows, "self_attn.v_proj": kv_rows,
            "mlp.gate_proj": dims["ff"][1], "mlp.up_proj": dims["ff"][1]}
    cols = {"self_attn.o_proj": q_rows, "mlp.down_proj": dims["ff"][1]}
    module, _, param = kind.rpartition(".")
    if module in rows:
        return (rows[module], *shape[1:]), "random"
    if module in cols and param == "weight":
        return (shape[0], cols[module]), "zero"
    if module in cols:  # an output bias: unchanged by growth, zero in a new layer
        return shape, None
    return shape, None


def _zero_in_new_layer(kind: str) -> bool:
    return kind.startswith(("self_attn.o_proj", "mlp.down_proj"))


def pad(source: Path, outdir: Path, layers: int | None = None, intermediate: int | None = None,
        heads: int | None = None, seed: int = 0) -> Path:
    """Write the padded checkpoint to ``outdir`` and return it. ``None`` keeps a dimension as it is."""
    source, outdir = Path(source), Path(outdir)
    config_file = source / "config.json"
    if not config_file.is_file():
        raise PaddingError(f"{source}: no config.json (expected a Hugging Face checkpoint directory)")
    files = sorted(source.glob("*.safetensors"))
    if not files:
        raise PaddingError(f"{source}: no .safetensors files")
    if outdir.resolve() == source.resolve():
        raise PaddingError("OUT_DIR must differ from SRC_DIR")
    config = json.loads(config_file.read_text())
    try:
        dims = _check_config(config, layers or config["num_hidden_layers"],
                             intermediate or config["intermediate_size"],
                             heads or config["num_attention_heads"])
    except PaddingError as error:
        raise PaddingError(f"{config_file}: {error}") from None
    tensors: dict[str, tuple[str, np.ndarray]] = {}
    for file in files:
        tensors.update(read_tensors(file))

    n_real, n_total = dims["layers"]
    real_layers: list[dict[str, str]] = [{} for _ in range(n_real)]  # kind -> full name
    for name in tensors:
        match = LAYER_NAME.match(name)
        if match:
            real_layers[int(match.group(1))][match.group(2)] = name

    rng = np.random.default_rng(seed)
    specs, makers = [], []
    for name, (dtype, array) in tensors.items():
        match = LAYER_NAME.match(name)
        if not match:
            specs.append((name, dtype, tuple(array.shape)))
            makers.append(lambda a=array: a)
            continue
        shape, fill = _grow(match.group(2), tuple(array.shape), dims)
        specs.append((name, dtype, shape))
        makers.append(lambda a=array, d=dtype, s=shape, f=fill: _extend(rng, d, a, s, f))
    for index in range(n_real, n_total):
        model = real_layers[index % n_real]  # new layers take their scales from the real ones in turn
        for kind, name in sorted(model.items()):
            dtype, array = tensors[name]
            shape, _ = _grow(kind, tuple(array.shape), dims)
            specs.append((f"model.layers.{index}.{kind}", dtype, shape))
            makers.append(lambda a=array, d=dtype, s=shape, k=kind: _new_layer_tensor(rng, d, a, s, k))

    outdir.mkdir(parents=True, exist_ok=True)
    for file in source.iterdir():
        if file.is_file() and file.suffix != ".safetensors" and file.name not in ("config.json", "model.safetensors.index.json"):
            shutil.copyfile(file, outdir / file.name)
    write_safetensors(outdir / "model.safetensors", specs, (make() for make in makers))
    (outdir / "config.json").write_text(json.dumps(_padded_config(config, dims), indent=2) + "\n")
    return outdir


def _extend(rng, dtype: str, array: np.ndarray, shape, fill: str | None) -> np.ndarray:
    """A real layer's tensor grown to ``shape``: real values first, then random rows or zero columns."""
    if fill is None or tuple(shape) == tuple(array.shape):
        return np.asarray(array)
    out = np.zeros(shape, dtype=array.dtype)
    if fill == "random":
        out[: array.shape[0]] = array
        out[array.shape[0]:] = random_like(rng, dtype, array, (shape[0] - array.shape[0], *shape[1:]))
    else:  # zero columns: new heads / neurons contribute nothing
        out[:, : array.shape[1]] = array
    return out


def _new_layer_tensor(rng, dtype: str, array: np.ndarray, shape, kind: str) -> np.ndarray:
    """A tensor of an added layer: zero output projections, copied norms, random everything else."""
    if _zero_in_new_layer(kind):
        return np.zeros(shape, dtype=array.dtype)
    if "norm" in kind:
        return np.asarray(array).copy()
    return random_like(rng, dtype, array, shape)


def _padded_config(config: dict, dims: dict) -> dict:
    config = dict(config)
    n_layers = dims["layers"][1]
    config["num_hidden_layers"] = n_layers
    config["intermediate_size"] = dims["ff"][1]
    config["num_attention_heads"] = dims["heads"][1]
    config["num_key_value_heads"] = dims["kv"][1]
    if dims["heads"][1] != dims["heads"][0] or "head_dim" in config:
        config["head_dim"] = dims["head_dim"]  # no longer hidden_size / heads
    if isinstance(config.get("layer_types"), list) and config["layer_types"]:
        types = config["layer_types"]
        config["layer_types"] = [types[i % len(types)] for i in range(n_layers)]
    return config


def parameter_count(checkpoint: Path) -> int:
    """Number of parameters stored in a checkpoint directory's safetensors files."""
    total = 0
    for file in Path(checkpoint).glob("*.safetensors"):
        total += sum(int(np.prod(a.shape, dtype=np.int64)) for _, a in read_tensors(file).values())
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assistant.bench.padding", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, metavar="SRC_DIR", help="Hugging Face checkpoint directory")
    parser.add_argument("outdir", type=Path, metavar="OUT_DIR", help="where the padded checkpoint goes")
    parser.add_argument("--layers", type=int, help="total decoder layers (added ones have zero o_proj and down_proj)")
    parser.add_argument("--intermediate", type=int, help="total feed-forward width (added neurons have zero down_proj columns)")
    parser.add_argument("--heads", type=int, help="total query heads, added as whole GQA groups with zero o_proj columns")
    parser.add_argument("--seed", type=int, default=0, help="seed for the random new weights (default 0)")
    args = parser.parse_args(argv)
    try:
        out = pad(args.source, args.outdir, args.layers, args.intermediate, args.heads, args.seed)
    except (PaddingError, OSError, KeyError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{out}: {parameter_count(out) / 1e6:.1f}M parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
