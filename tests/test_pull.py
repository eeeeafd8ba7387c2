"""`assistant pull` against a fake Hub on 127.0.0.1: a full pull, resumed and broken downloads, Hub errors, disk space."""

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import assistant
from assistant import cli, home, modelsets
from tests.fixtures.hub import TOKEN

ROOT = Path(assistant.__file__).resolve().parent.parent


@pytest.fixture
def served(tiny_checkpoint):
    """A tiny random Qwen2 checkpoint for a fake repository, plus files a pull must not download."""

    def make(extra: bool = True, seed: int = 0, **config) -> Path:
        directory = tiny_checkpoint("qwen2", seed=seed, **config)
        if extra:
            (directory / "README.md").write_text("# a model card\n")
            (directory / "pytorch_model.bin").write_bytes(b"\0" * 1000)
            (directory / "onnx").mkdir()
            (directory / "onnx" / "model.safetensors").write_bytes(b"\0" * 1000)
        return directory

    return make


def pull(*argv) -> int:
    return cli.main(["pull", *argv])


def models_left() -> list[str]:
    return sorted(p.name for p in home.models_dir().iterdir())


def test_pull_makes_a_three_level_set_that_generates(fake_hub, served, capsys):
    fake_hub.add_repo("org/Tiny-Coder", served())
    fake_hub.add_repo("org/tiny-draft", served(seed=1))

    assert pull("org/Tiny-Coder", "--draft", "org/tiny-draft") == 0
    out = capsys.readouterr().out
    assert "model set 'tiny-coder' is ready (the default)" in out

    model_set = modelsets.get("tiny-coder")
    assert [level.role for level in model_set.levels] == ["target", "mxfp4", "draft"]
    assert [level.path.name for level in model_set.levels] == [
        "tiny-coder.bf16.gguf", "tiny-coder.mxfp4.gguf", "tiny-draft.mxfp4.gguf"]
    assert all(level.path.parent == home.models_dir() and level.size_bytes > 0 for level in model_set.levels)

    fetched = {(r.repo, r.filename) for r in fake_hub.gets()}
    for repo in ("org/Tiny-Coder", "org/tiny-draft"):
        assert (repo, "model.safetensors") in fetched and (repo, "tokenizer.json") in fetched
        for unwanted in ("README.md", "pytorch_model.bin", "onnx/model.safetensors"):
            assert (repo, unwanted) not in fetched
    assert fake_hub.unknown == [], "every endpoint huggingface-hub called is one the fake hub knows"

    pytest.importorskip("llama_cpp")
    from assistant.speculative.pipeline import Pipeline

    with Pipeline.load(model_set, n_ctx=256, threads=1) as pipeline:
        answer = pipeline.generate("def fibonacci(n):", max_tokens=12)
        tokens, stats = list(answer), answer.stats
    assert len(tokens) == 12 and "".join(event.text for event in tokens)
    assert [level.role for level in stats.levels] == ["target", "mxfp4", "draft", "ngram"]


def test_a_tokenizer_the_converter_refuses_costs_no_weight_download(fake_hub, served, capsys):
    """Everything conversion reads besides the weights is checked before the weights are fetched."""
    directory = served(extra=False)
    tokenizer = json.loads((directory / "tokenizer.json").read_text())
    tokenizer["model"]["type"] = "Unigram"
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    fake_hub.add_repo("org/unigram", directory)
    assert pull("org/unigram") == 1
    err = capsys.readouterr().err
    assert "tokenizer.json: tokenizer model 'Unigram' is not supported" in err
    fetched = {r.filename for r in fake_hub.gets("org/unigram")}
    assert "tokenizer.json" in fetched and "model.safetensors" not in fetched
    assert models_left() == []


def test_a_repository_without_tokenizer_json_is_refused_before_downloading(fake_hub, served, capsys):
    directory = served(extra=False)
    (directory / "tokenizer.json").rename(directory / "tokenizer.model")
    fake_hub.add_repo("org/spm-only", directory)
    assert pull("org/spm-only") == 1
    assert "has no tokenizer.json (tokenizer.model alone is not supported)" in capsys.readouterr().err
    assert [r for r in fake_hub.gets("org/spm-only") if r.filename] == []


def test_known_pair_is_suggested_not_downloaded(fake_hub, served, capsys):
    fake_hub.add_repo("Qwen/Qwen2.5-Coder-7B-Instruct", served(extra=False))

    assert pull("Qwen/Qwen2.5-Coder-7B-Instruct") == 0
    out = capsys.readouterr().out
    assert "add --draft Qwen/Qwen2.5-Coder-0.5B-Instruct" in out
    assert {r.repo for r in fake_hub.log} == {"Qwen/Qwen2.5-Coder-7B-Instruct"}
    assert [lv.role for lv in modelsets.get("qwen2.5-coder-7b-instruct").levels] == ["target", "mxfp4"]


def test_missing_repository_is_a_clear_error(fake_hub, capsys):
    assert pull("org/no-such-model") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: org/no-such-model: no such model repository on http://127.0.0.1:")
    assert len(err.strip().splitlines()) == 1
    assert models_left() == []


def test_missing_revision_is_a_clear_error(fake_hub, served, capsys):
    fake_hub.add_repo("org/tiny", served(extra=False))
    assert pull("org/tiny", "--revision", "v9") == 1
    assert capsys.readouterr().err == "error: org/tiny: revision 'v9' not found (a branch, tag or commit)\n"


def test_gated_repository_needs_a_token(fake_hub, served, capsys, monkeypatch):
    fake_hub.add_repo("org/gated", served(extra=False), gated=True)

    assert pull("org/gated") == 1
    err = capsys.readouterr().err
    assert err == (f"error: org/gated is gated: accept its terms at {fake_hub.url}/org/gated, "
                   "then set HF_TOKEN or run `hf auth login`\n")
    assert [r.status for r in fake_hub.log if r.filename] == [401]

    monkeypatch.setenv("HF_TOKEN", "hf_someone_else")
    assert pull("org/gated") == 1
    assert "the Hugging Face token in use has no access" in capsys.readouterr().err
    assert models_left() == [] and fake_hub.completed_files("org/gated") == set()

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert pull("org/gated") == 0
    assert len(modelsets.get("gated").levels) == 2


def test_disconnect_mid_file_is_resumed_with_a_range_request(fake_hub, served):
    # huggingface-hub writes 10 MiB chunks, so a resume starts at the last whole chunk: weights of ~20 MB.
    repo = fake_hub.add_repo("org/flaky", served(extra=False, hidden_size=512, intermediate_size=1024))
    weights = repo.files["model.safetensors"]
    cut = len(weights) * 2 // 3
    assert cut > 10 * 2**20
    fake_hub.disconnect("org/flaky", "model.safetensors", after_bytes=cut)

    assert pull("org/flaky") == 0
    gets = [r for r in fake_hub.gets("org/flaky") if r.filename == "model.safetensors"]
    assert [r.completed for r in gets] == [False, True]
    assert gets[0].range is None and gets[1].range.startswith("bytes=")
    assert 0 < int(gets[1].range[len("bytes="):-1]) <= cut, "the second request asks only for the missing tail"
    cached = next(fake_hub.cache_dir.rglob("snapshots/*/model.safetensors"))
    assert hashlib.sha256(cached.read_bytes()).digest() == hashlib.sha256(weights).digest()
    assert len(modelsets.get("flaky").levels) == 2


def test_interrupted_pull_resumes_without_fetching_finished_files(fake_hub, served, capsys):
    big = fake_hub.add_repo("org/big", served(extra=False))
    fake_hub.add_repo("org/small", served(extra=False))
    stalled = fake_hub.stall("org/small", "model.safetensors", after_bytes=100_000)

    # The user presses Ctrl-C while the draft's weights are coming in.
    command = [sys.executable, "-m", "assistant", "pull", "org/big", "--draft", "org/small"]
    process = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert stalled.wait(timeout=120), "the pull never reached the draft's weights"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert list(fake_hub.cache_dir.rglob("*.incomplete")) == [], "no partial file is left in the cache"
    assert models_left() == [], "nothing is converted or registered before every file is here"
    first_run = len(fake_hub.log)
    assert fake_hub.completed_files("org/big") == set(big.files) and "model.safetensors" in big.files

    assert pull("org/big", "--draft", "org/small") == 0
    second_run = [r for r in fake_hub.log[first_run:] if r.method == "GET" and r.filename]
    assert [(r.repo, r.filename) for r in second_run if r.repo == "org/big"] == [], "finished files are not fetched again"
    assert ("org/small", "model.safetensors") in {(r.repo, r.filename) for r in second_run if r.completed}
    assert [lv.role for lv in modelsets.get("big").levels] == ["target", "mxfp4", "draft"]


def test_insufficient_disk_is_refused_with_the_numbers(fake_hub, served, capsys):
    repo = fake_hub.add_repo("org/huge", served(extra=False))
    repo.advertised["model.safetensors"] = 900 * 10**12  # larger than any disk this test runs on

    assert pull("org/huge") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: not enough disk space for pulling org/huge: needs 2250.0 TB (download 900.0 TB in ")
    assert "conversion 1350.0 TB in " in err and " free there" in err
    assert fake_hub.gets() == [], "nothing is downloaded"
    assert models_left() == []


def test_bad_name_and_taken_name_are_refused(fake_hub, served, capsys):
    fake_hub.add_repo("org/tiny", served(extra=False))
    assert pull("org/tiny", "--name", "../evil") == 1
    assert "--name '../evil': use letters, digits" in capsys.readouterr().err
    assert pull("org/tiny") == 0
    assert pull("org/tiny") == 1
    assert "model set 'tiny' already exists" in capsys.readouterr().err


def test_existing_files_are_not_overwritten_without_force(fake_hub, served, capsys):
    fake_hub.add_repo("org/tiny", served(extra=False))
    stray = home.models_dir() / "tiny.mxfp4.gguf"
    stray.write_bytes(b"someone else's file")
    assert pull("org/tiny") == 1
    assert capsys.readouterr().err == f"error: {stray}: already exists; pass --force to overwrite it\n"
    assert fake_hub.gets() == [] and stray.read_bytes() == b"someone else's file"
    assert pull("org/tiny", "--force") == 0
    assert modelsets.get("tiny").levels[1].path == stray and stray.stat().st_size > 1000


def test_unreachable_hub_is_a_clear_error(fake_hub, monkeypatch, capsys):
    fake_hub.stop()
    assert pull("org/tiny") == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: downloading org/tiny from {fake_hub.url} failed (")
    assert err.endswith("; run the same command again to resume\n") and len(err.splitlines()) == 1
