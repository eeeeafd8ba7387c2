"""`assistant convert` on bad input: one clear line naming the file, exit status 1, nothing left behind."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from assistant.cli import main

REPO = Path(__file__).resolve().parents[1]


def run_convert(capsys, source, outdir, *extra) -> tuple[int, str]:
    code = main(["convert", str(source), "--outdir", str(outdir), "--no-register", *extra])
    return code, capsys.readouterr().err


def assert_refused(code: int, err: str, outdir: Path, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not outdir.exists() or list(outdir.iterdir()) == []


def rewrite_header(path: Path, change) -> None:
    """Apply ``change`` to the parsed safetensors header and write the file back with the same data."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    change(header)
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + raw[8 + length :])


def test_not_a_safetensors_suffix(tmp_path, capsys):
    source = tmp_path / "model.bin"
    source.write_bytes(b"\x80\x02pickle")
    assert_refused(*run_convert(capsys, source, tmp_path / "out"), tmp_path / "out", str(source), "not a .safetensors file")


def test_not_safetensors_content(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    (checkpoint / "model.safetensors").write_text("this is a text file, not weights\n" * 10)
    code, err = run_convert(capsys, checkpoint / "model.safetensors", tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", "model.safetensors", "not a safetensors file")


def test_truncated_file(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    weights = checkpoint / "model.safetensors"
    os.truncate(weights, weights.stat().st_size - 1000)
    assert_refused(*run_convert(capsys, checkpoint, tmp_path / "out"), tmp_path / "out", "model.safetensors", "truncated")


def test_malformed_header(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    weights = checkpoint / "model.safetensors"
    raw = weights.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    broken = b'{"model.norm.weight": {"dtype": "BF16", "shape": [64], ' + b" " * (length - 56)
    weights.write_bytes(raw[:8] + broken[:length] + raw[8 + length :])
    assert_refused(*run_convert(capsys, checkpoint, tmp_path / "out"), tmp_path / "out", "malformed safetensors header")


def test_header_offsets_disagree_with_shape(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    rewrite_header(checkpoint / "model.safetensors", lambda h: h["model.norm.weight"].update(shape=[65]))
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", "malformed safetensors header", "model.norm.weight")


def test_missing_config(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    (checkpoint / "config.json").unlink()
    assert_refused(*run_convert(capsys, checkpoint, tmp_path / "out"), tmp_path / "out", "config.json", "missing")


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_missing_tokenizer_files(tiny_checkpoint, tmp_path, capsys, name):
    checkpoint = tiny_checkpoint("qwen2")
    (checkpoint / name).unlink()
    assert_refused(*run_convert(capsys, checkpoint, tmp_path / "out"), tmp_path / "out", name, "missing")


def test_unsupported_dtype(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    rewrite_header(checkpoint / "model.safetensors", lambda h: h["model.layers.0.mlp.up_proj.weight"].update(dtype="I16"))
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", "model.layers.0.mlp.up_proj.weight", "unsupported dtype I16")


def test_shapes_disagree_with_config(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    config = json.loads((checkpoint / "config.json").read_text())
    config["intermediate_size"] = 96
    (checkpoint / "config.json").write_text(json.dumps(config))
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", "mlp.", "[128, 64]", "[96, 64]")


def test_unsupported_architecture_is_named(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    config = json.loads((checkpoint / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (checkpoint / "config.json").write_text(json.dumps(config))
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", "GPT2LMHeadModel", "LlamaForCausalLM", "Qwen2ForCausalLM",
                   "Qwen3ForCausalLM", "MistralForCausalLM")


def test_qwen3_attention_bias_is_refused(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen3", bias=True)
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", "self_attn.", "_proj.bias", "qwen3")


def test_unknown_pre_tokenizer_is_refused(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    tokenizer = json.loads((checkpoint / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\w+|\s+"
    (checkpoint / "tokenizer.json").write_text(json.dumps(tokenizer))
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", "tokenizer.json", "unrecognised", "pre-tokenizer")


def test_existing_output_needs_force(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    outdir = tmp_path / "out"
    assert run_convert(capsys, checkpoint, outdir, "--name", "m")[0] == 0
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in outdir.iterdir()}
    assert sorted(before) == ["m.bf16.gguf", "m.mxfp4.gguf"]
    code, err = run_convert(capsys, checkpoint, outdir, "--name", "m")
    assert code == 1 and err.strip().startswith("error: ") and "m.bf16.gguf" in err and "--force" in err
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in outdir.iterdir()} == before
    assert run_convert(capsys, checkpoint, outdir, "--name", "m", "--force")[0] == 0
    assert sorted(p.name for p in outdir.iterdir()) == ["m.bf16.gguf", "m.mxfp4.gguf"]


def test_full_disk_leaves_nothing(tiny_checkpoint, tmp_path):
    """A file size limit makes writes fail with EFBIG past 300 kB, as a full disk fails them with ENOSPC."""
    checkpoint = tiny_checkpoint("qwen2")
    outdir = tmp_path / "out"
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))\n"
        "from assistant.cli import main\n"
        f"sys.exit(main(['convert', {str(checkpoint)!r}, '--outdir', {str(outdir)!r}, '--no-register']))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "cannot write" in lines[0], result.stderr
    assert list(outdir.iterdir()) == []


def test_ctrl_c_removes_partial_files(tmp_path):
    """Interrupted mid-write, the command exits 130 and leaves no *.part (nor finished) file behind."""
    import signal
    import time

    from converters.random_checkpoint import make_checkpoint

    checkpoint = make_checkpoint(tmp_path / "ckpt", hidden=1024, layers=8, intermediate=2816, heads=8, kv_heads=2)
    outdir = tmp_path / "out"
    outdir.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "assistant", "convert", str(checkpoint), "--outdir", str(outdir), "--no-register"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    while not any(p.suffix == ".part" and p.stat().st_size > 1_000_000 for p in outdir.iterdir()):
        assert process.poll() is None and time.monotonic() < deadline, "conversion ended before it could be interrupted"
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert list(outdir.iterdir()) == []
