"""Drafts compressed from the target's own file (issue 54): agreement measured on the target's own text, the
greedy block search, and `assistant bench --drafts` end to end on the bench pair."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys

import pytest

from assistant import modelsets
from assistant.drafts.agreement import measure, predicted_speedup, self_written
from assistant.drafts.search import dropped_blocks


@pytest.fixture(scope="module")
def references(demo_gguf):
    return self_written(demo_gguf["target_bf16"], tokens=24, threads=1)


def test_the_target_agrees_with_its_own_text_and_its_mxfp4_copy_less(imported_smollm2):
    """On the real demo model: batched and token by token round alike with our kernels, so the target agrees with
    its own text; its MXFP4 copy, a quarter of its bytes, agrees less and costs less."""
    references = self_written(imported_smollm2["bf16"], tokens=32, threads=1)
    assert len(references) == 4 and all(0 < len(r.answer) <= 32 for r in references)
    itself = measure(imported_smollm2["bf16"], references, 49152, threads=1)
    copy = measure(imported_smollm2["mxfp4"], references, 49152, threads=1)
    assert itself.agreement >= 0.99 and copy.agreement < 0.95
    assert copy.size < itself.size / 3 and copy.seconds_per_token < itself.seconds_per_token


def test_the_greedy_search_drops_the_block_that_costs_least(demo_gguf, references, tmp_path):
    (first, measured), = dropped_blocks(demo_gguf["target_bf16"], references, 8192, tmp_path, steps=1, threads=1)
    assert len(first) == 1 and measured.path.exists()
    assert [path.name for path in tmp_path.iterdir()] == [measured.path.name]  # the losers are deleted
    from assistant.drafts.blocks import without_blocks

    for block in range(8):  # no other single block keeps more agreement
        if block not in first:
            other = measure(without_blocks(demo_gguf["target_bf16"], {block}, tmp_path / "other.gguf"), references,
                            8192, threads=1)
            assert other.agreement <= measured.agreement


def test_predicted_speedup():
    assert predicted_speedup(0.0, 0.1, 1.0) == (1.0, 0)  # a draft never kept does not pay
    speedup, length = predicted_speedup(0.8, 0.1, 1.0)
    assert speedup > 1.5 and 1 <= length <= 8
    assert predicted_speedup(0.8, 0.5, 1.0)[0] < speedup  # dearer drafts pay less
    rising = tuple(1.0 + 0.25 * k for k in range(9))  # verifying k tokens costs a batch of k + 1
    slower, shorter = predicted_speedup(0.8, 0.1, 1.0, rising)
    assert slower < speedup and shorter < length


def test_bench_drafts_writes_the_table(demo_gguf, tmp_path):
    home = tmp_path / "home"
    modelsets.register("pair", [modelsets.Level("target", demo_gguf["target_bf16"]),
                                modelsets.Level("mxfp4", demo_gguf["target_mxfp4"])], models_dir=home / "models")
    env = {**os.environ, "ASSISTANT_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "assistant", "bench", "--drafts", "pair", "--draft-steps", "1",
                           "--threads", "1", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "out" / "drafts.json").read_text())
    methods = [row["method"] for row in result["rows"]]
    assert methods[:2] == ["the target itself", "the set's mxfp4"]
    assert methods.count("cast") == 3 and "target without blocks" in methods and "mxfp4 without blocks" in methods
    assert result["measured"]["answers_differing"] == 0
    assert "| draft | setting |" in (tmp_path / "out" / "drafts.md").read_text()


def _assistant(home):
    env = {**os.environ, "ASSISTANT_HOME": str(home)}
    return lambda *args: subprocess.run([sys.executable, "-m", "assistant", *args], env=env, capture_output=True,
                                        text=True, timeout=600)


def test_assistant_draft_adds_the_best_candidate_to_the_set(demo_gguf, tmp_path):
    """A set of the target alone gains a cast of it; answers stay the target's; the draft is refused once the
    target file changes, and the next `assistant draft` replaces it."""
    home = tmp_path / "home"
    models = home / "models"
    models.mkdir(parents=True)
    target = models / "t.bf16.gguf"
    shutil.copyfile(demo_gguf["target_bf16"], target)
    modelsets.register("solo", [modelsets.Level("target", target)], models_dir=models)
    run = _assistant(home)
    dry = run("draft", "solo", "--dry-run", "--threads", "1")
    assert dry.returncode == 0, dry.stderr
    assert "would gain cast" in dry.stdout and len(modelsets.get("solo", models).levels) == 1  # nothing changed
    done = run("draft", "solo", "--threads", "1")
    assert done.returncode == 0, done.stderr
    target_level, added = modelsets.get("solo", models).levels
    assert "added cast" in done.stdout and added.role == "draft" and added.made_from
    assert added.path.is_relative_to(models) and added.path.exists()
    assert not [path for path in models.iterdir() if path.name.startswith("assistant-draft-")]  # scratch removed
    answers = [json.loads(run("generate", "def add(a, b):", "-m", "solo", *extra, "-n", "24", "--json",
                              "--threads", "1").stdout)["tokens"] for extra in ((), ("--levels", "1"))]
    assert answers[0] == answers[1]
    assert "made from the target" in run("models", "list").stdout

    shutil.copyfile(demo_gguf["target_mxfp4"], target)  # the target file is replaced by another model
    refused = run("generate", "def add(a, b):", "-m", "solo", "-n", "4", "--threads", "1")
    assert refused.returncode == 1 and "made from an earlier version" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "STALE" in run("models", "list").stdout
    assert run("generate", "x", "-m", "solo", "-n", "4", "--levels", "1", "--threads", "1").returncode == 0
    again = run("draft", "solo", "--threads", "1")
    assert again.returncode == 0, again.stderr
    levels = modelsets.get("solo", models).levels
    assert "left out" in again.stderr and len(levels) <= 2 and not modelsets.get("solo", models).stale_levels()
    assert added.path.exists() == any(level.path == added.path for level in levels)



def test_assistant_draft_on_a_terminal_shows_a_progress_bar(demo_gguf, tmp_path):
    """On a terminal each candidate is a step of one bar, counted to the end; the results follow it."""
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    modelsets.register("solo", [modelsets.Level("target", demo_gguf["target_bf16"])], models_dir=home / "models")
    parent, child = pty.openpty()
    done = subprocess.run([sys.executable, "-m", "assistant", "draft", "solo", "--dry-run", "--threads", "1"],
                          env={**os.environ, "ASSISTANT_HOME": str(home)}, stdout=subprocess.PIPE, stderr=child,
                          text=True, timeout=600)
    os.close(child)
    shown = b""
    while chunk := _read_ready(parent):
        shown += chunk
    os.close(parent)
    assert done.returncode == 0 and "would gain" in done.stdout
    bars = [line for line in shown.decode().split("\r") if line.startswith("draft solo [")]
    total = int(bars[0].split("] 0/")[1].split()[0])
    assert [int(line.split("] ")[1].split("/")[0]) for line in bars] == list(range(total))
    assert "the target itself" in bars[1] and "cast Q4_K_M" in shown.decode()


def _read_ready(fd: int) -> bytes:
    """What a pseudo-terminal holds now (b"" once its writer has closed and it is drained)."""
    try:
        return os.read(fd, 65536) if select.select([fd], [], [], 1.0)[0] else b""
    except OSError:  # EIO: the other end is closed
        return b""


def test_a_draft_predicted_slower_than_the_new_one_leaves_the_chain():
    from pathlib import Path

    from assistant.drafts.candidates import chain_with

    target, copy, trimmed, cast = Path("t.gguf"), Path("m.gguf"), Path("m.vocab.gguf"), Path("q3.gguf")
    rows = [{"path": str(path), "seconds_per_token": cost, "predicted_speedup": speedup}
            for path, cost, speedup in ((target, 10.0, 1.0), (copy, 3.3, 1.5), (trimmed, 2.5, 1.7), (cast, 4.0, 1.4))]
    model_set = modelsets.ModelSet("s", [modelsets.Level("target", target), modelsets.Level("mxfp4", copy)])
    assert chain_with(model_set, trimmed, rows) == [target, trimmed]  # predicted faster: it takes the copy's place
    assert chain_with(model_set, cast, rows) == [target, cast, copy]  # predicted slower: the copy stays, under it


def test_import_with_make_draft_drafts_the_new_set(demo_gguf, tmp_path):
    run = _assistant(tmp_path / "home")
    plain = run("import", str(demo_gguf["target_bf16"]), "--name", "plain", "--copy", "no")
    assert plain.returncode == 0, plain.stderr
    assert "`assistant draft plain` makes one" in plain.stdout
    drafted = run("import", str(demo_gguf["target_bf16"]), "--name", "drafted", "--copy", "no", "--make-draft")
    assert drafted.returncode == 0, drafted.stderr
    levels = modelsets.get("drafted", tmp_path / "home" / "models").levels
    assert "added cast" in drafted.stdout and [level.role for level in levels] == ["target", "draft"]
    assert levels[1].made_from == modelsets.fingerprint(demo_gguf["target_bf16"])
