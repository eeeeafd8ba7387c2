"""The README's `assistant serve` snippets, run as written against a real server (only its port changed)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BASE = "http://127.0.0.1:8080"


def section() -> str:
    text = README.read_text()
    start = text.index("## Editors and tools: `assistant serve`")
    return text[start:text.index("\n## ", start + 1)]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section(), re.S)


@pytest.fixture(scope="module")
def keyless_server(server_home):
    from tests.fixtures.serve import ServerProcess

    process = ServerProcess(server_home, api_key=None).wait_ready()
    yield process
    assert process.stop() == 0


def test_the_python_snippet_runs(keyless_server):
    (snippet,) = blocks("python")
    done = subprocess.run([sys.executable, "-c", snippet.replace(BASE, keyless_server.url)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    *answer, speed = done.stdout.rstrip("\n").split("\n")
    assert "".join(answer).strip() and speed.endswith(" tokens/s") and float(speed.split()[0]) > 0


def test_the_curl_snippet_runs(keyless_server):
    curl = next(block for block in blocks("sh") if block.startswith("curl"))
    done = subprocess.run(["bash", "-c", curl.replace(BASE, keyless_server.url)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and '"object":"chat.completion"' in done.stdout, done.stdout + done.stderr


def test_editor_configurations_name_the_same_server_and_model():
    (continue_config,) = blocks("yaml")
    assert f"apiBase: {BASE}/v1" in continue_config and "model: demo" in continue_config
    aider = next(block for block in blocks("sh") if "aider" in block)
    assert f"OPENAI_API_BASE={BASE}/v1" in aider and "--model openai/demo" in aider
    assert "--port 8080" in section() and "127.0.0.1:8080" in section()
