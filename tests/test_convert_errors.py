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


def test_overlapping_tensors_are_refused(tiny_checkpoint, tmp_path, capsys):
    """Two tensors over the same bytes: sizes agree with shapes, yet the data would be converted twice."""
    checkpoint = tiny_checkpoint("qwen2")

    def overlap(header):
        first, second = "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"
        start, end = header[first]["data_offsets"]
        header[second]["data_offsets"] = [start + 2, end + 2]  # one BF16 element in, same length

    rewrite_header(checkpoint / "model.safetensors", overlap)
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", "model.safetensors", "overlap", "input_layernorm",
                   "post_attention_layernorm")


def test_a_shape_whose_element_count_overflows_is_refused(tiny_checkpoint, tmp_path, capsys):
    """2^32 x 2^32 x 2 elements is 2^65, which int64 arithmetic wraps to 0: matching an empty byte range."""
    checkpoint = tiny_checkpoint("qwen2")

    def overflow(header):
        start = header["model.norm.weight"]["data_offsets"][0]
        header["model.norm.weight"].update(shape=[2**32, 2**32, 2], data_offsets=[start, start])

    rewrite_header(checkpoint / "model.safetensors", overflow)
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", "model.norm.weight", "[4294967296, 4294967296, 2]",
                   "more than any file can hold")


def edit_json(key_path: str, value):
    """A change to one key of a JSON file; ``key_path`` "model.vocab" reaches one level down."""
    def change(data):
        *parents, key = key_path.split(".")
        for parent in parents:
            data = data[parent]
        data[key] = value
    return change


MALFORMED = [
    ("config.json", "{\"architectures\": [", "not readable JSON"),
    ("config.json", edit_json("architectures", 5), "\"architectures\" must be a list, not 5"),
    ("config.json", edit_json("architectures", [{"name": "Qwen2ForCausalLM"}]), "\"architectures\" item 0 must be a string"),
    ("config.json", edit_json("hidden_size", "64"), "\"hidden_size\" must be an integer, not \"64\""),
    ("config.json", edit_json("rope_scaling", {"rope_type": "linear", "factor": "x"}), "\"rope_scaling\" field \"factor\""),
    ("config.json", edit_json("vocab_size", 10**12), "vocab_size 1000000000000"),
    ("tokenizer.json", "[]", "expected a JSON object"),
    ("tokenizer.json", edit_json("model.vocab", ["a", "b"]), "\"model\" field \"vocab\" must be an object"),
    ("tokenizer.json", edit_json("added_tokens", [{"id": "8190", "content": "<|im_start|>"}]), "item 0 field \"id\""),
    ("tokenizer.json", edit_json("pre_tokenizer", "ByteLevel"), "\"pre_tokenizer\" must be an object"),
    ("tokenizer.json", "[" * 100_000, "not readable JSON"),
    ("tokenizer_config.json", "{\"chat_template\": ", "not readable JSON"),
    ("tokenizer_config.json", edit_json("chat_template", 5), "\"chat_template\" must be a string or a list, not 5"),
    ("tokenizer_config.json", edit_json("eos_token", 5), "\"eos_token\" must be a string or an object, not 5"),
]


@pytest.mark.parametrize("name,change,expected", MALFORMED, ids=[f"{n}:{e[:24]}" for n, _, e in MALFORMED])
def test_malformed_side_files_are_one_line_from_the_command(tiny_checkpoint, tmp_path, name, change, expected):
    """Not JSON, or JSON of the wrong types: `assistant convert` says which file and key, exits 1, writes nothing."""
    checkpoint = tiny_checkpoint("qwen2")
    path = checkpoint / name
    if callable(change):
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
    else:
        path.write_text(change)
    outdir = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "assistant", "convert", str(checkpoint), "--outdir", str(outdir),
                           "--no-register"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert_refused(done.returncode, done.stderr, outdir, str(path), expected)


def test_pull_refuses_an_implausible_vocab_size_before_the_weights(fake_hub, tiny_checkpoint, capsys):
    """The vocabulary list is sized by config.json's vocab_size: a repository claiming 10^12 tokens is refused
    from its side files, before a byte of weights is fetched or a list is allocated."""
    from assistant import home

    directory = tiny_checkpoint("qwen2")
    edit = edit_json("vocab_size", 10**12)
    config = json.loads((directory / "config.json").read_text())
    edit(config)
    (directory / "config.json").write_text(json.dumps(config))
    fake_hub.add_repo("org/huge-vocab", directory)
    assert main(["pull", "org/huge-vocab"]) == 1
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [err.strip()]
    assert "config.json: vocab_size 1000000000000" in err
    assert "model.safetensors" not in {request.filename for request in fake_hub.gets("org/huge-vocab")}
    assert list(home.models_dir().iterdir()) == []
