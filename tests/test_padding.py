"""The padding tool must grow a checkpoint without changing a single output: transformers float32 logits
of the padded model equal the original's up to float rounding."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from assistant.bench import padding
from converters.safetensors_file import read_tensors

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

BENCH_DRAFT = Path(__file__).resolve().parents[1] / "assistant" / "demo" / "draft"  # the trained bench draft


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory):
    """A random Qwen2 with GQA (4 query heads on 2 KV heads), q/k/v biases and untied embeddings, in BF16."""
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
    )
    model = transformers.Qwen2ForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():  # trained-looking biases and norms, so copying them exactly is tested
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    path = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(path)
    return path


def logits(path: Path, tokens: list[int]) -> torch.Tensor:
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0]


def assert_same_function(original: Path, padded: Path, tokens: list[int]):
    a, b = logits(original, tokens), logits(padded, tokens)
    assert torch.isfinite(b).all()
    torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_layers_neurons_and_heads_leave_logits_unchanged(tiny_qwen2, tmp_path):
    out = padding.pad(tiny_qwen2, tmp_path / "padded", layers=5, intermediate=160, heads=8, seed=1)
    config = json.loads((out / "config.json").read_text())
    assert (config["num_hidden_layers"], config["intermediate_size"]) == (5, 160)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (8, 4, 16)
    assert padding.parameter_count(out) > padding.parameter_count(tiny_qwen2)
    assert_same_function(tiny_qwen2, out, [1, 5, 9, 200, 33, 7, 7, 100, 2, 64])


def test_real_weights_are_copied_bit_for_bit_and_new_outputs_are_zero(tiny_qwen2, tmp_path):
    out = padding.pad(tiny_qwen2, tmp_path / "padded", layers=3, intermediate=128, heads=6)
    before = read_tensors(tiny_qwen2 / "model.safetensors")
    after = read_tensors(out / "model.safetensors")
    _, q = after["model.layers.0.self_attn.q_proj.weight"]
    np.testing.assert_array_equal(q[:64], before["model.layers.0.self_attn.q_proj.weight"][1])
    _, down = after["model.layers.1.mlp.down_proj.weight"]
    np.testing.assert_array_equal(down[:, :96], before["model.layers.1.mlp.down_proj.weight"][1])
    assert not down[:, 96:].any()
    _, gate = after["model.layers.1.mlp.gate_proj.weight"]
    assert gate[96:].any()  # new neurons are live on the input side
    assert not after["model.layers.2.self_attn.o_proj.weight"][1].any()
    assert not after["model.layers.2.mlp.down_proj.weight"][1].any()
    np.testing.assert_array_equal(after["lm_head.weight"][1], before["lm_head.weight"][1])


def test_bad_options_are_one_line_errors(tiny_qwen2, tmp_path):
    with pytest.raises(padding.PaddingError, match="multiple of 2"):
        padding.pad(tiny_qwen2, tmp_path / "x", heads=5)
    with pytest.raises(padding.PaddingError, match="smaller"):
        padding.pad(tiny_qwen2, tmp_path / "x", layers=1)
    result = subprocess.run([sys.executable, "-m", "assistant.bench.padding", str(tmp_path / "nowhere"), str(tmp_path / "y")],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.startswith("error:") and "config.json" in result.stderr


def test_bench_reports_a_padding_error_in_one_line(tiny_qwen2, tmp_path):
    """A checkpoint the padding cannot grow reaches `assistant bench` users as one line naming the file."""
    models = tmp_path / "models"
    for name in ("bench-target", "bench-draft"):
        shutil.copytree(tiny_qwen2, models / name)
        config = json.loads((models / name / "config.json").read_text())
        (models / name / "config.json").write_text(json.dumps({**config, "model_type": "phi3"}))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "p", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    result = subprocess.run([sys.executable, "-m", "assistant", "bench", "--workload", "b", "--models", str(models),
                             "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out"), "--prompts", str(prompts)],
                            capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert f"error: {models / 'bench-target' / 'config.json'}: model_type 'phi3' is not supported" in result.stderr


def test_bench_draft_padded_keeps_its_logits(tmp_path):
    out = padding.pad(BENCH_DRAFT, tmp_path / "draft", layers=4, intermediate=1024, heads=8)
    assert_same_function(BENCH_DRAFT, out, [8189, 10, 400, 1000, 77, 3000, 12, 5, 8000, 42, 43, 44])
