"""The benchmark's prompts travel in the package: an installed assistant runs `assistant bench` with nothing
beside it (no ../shared), so the wheel must carry them where the bench looks by default."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

READ_DEFAULT_PROMPTS = """
import assistant
from assistant.bench.workloads import DEFAULT_PROMPTS
from assistant.bench.workloads import load_prompts

print(assistant.__file__)
print(len(load_prompts(DEFAULT_PROMPTS, None)))
"""


def source_tree(destination: Path) -> Path:
    """The checkout's files as a clone has them (tracked and new, not ignored), away from its build/ directory,
    whose leftovers setuptools would pack whatever the package data says."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file() and name.split("/")[0] in PACKAGED:
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, destination / name)
    return destination


PACKAGED = {"pyproject.toml", "README.md", "assistant", "converters", "native"}


def test_the_wheel_carries_the_prompts_the_bench_reads_by_default(tmp_path):
    source = source_tree(tmp_path / "source")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "--wheel-dir", str(tmp_path / "dist"), str(source)], capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel, = (tmp_path / "dist").glob("assistant-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    # the installed copy, not this checkout, answers: PYTHONPATH comes before the editable install's finder
    run = subprocess.run([sys.executable, "-c", READ_DEFAULT_PROMPTS], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    module, count = run.stdout.split()
    assert Path(module).is_relative_to(site)
    packaged = (REPO / "assistant" / "bench" / "prompts.jsonl").read_text().splitlines()
    assert int(count) == len([line for line in packaged if line.strip()]) >= 50
