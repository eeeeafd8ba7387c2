"""The bundled demo model set: a toy Qwen2 code model pair trained for our benchmarks.

It writes plausible, repetitive Python, not good answers; it exists so the product works offline with nothing
to download. On first use it is converted by our own converter into the user data directory and registered
as the default three-level set: BF16 target, its MXFP4 copy, and the small draft in MXFP4.
"""

from __future__ import annotations

from pathlib import Path

from assistant import home, modelsets

NAME = "demo"
CHECKPOINTS = Path(__file__).resolve().parent / "demo"
NOTICE = (
    "The demo model set is a toy trained for benchmarks: it writes plausible, repetitive Python, not good "
    "answers. Run `assistant pull Qwen/Qwen2.5-Coder-7B-Instruct --draft Qwen/Qwen2.5-Coder-0.5B-Instruct` "
    "for a real model."
)


def ensure_demo_set(models_dir: Path | None = None) -> modelsets.ModelSet:
    """The registered demo set, converting the bundled checkpoints first if its files are missing."""
    models_dir = models_dir or home.models_dir()
    try:
        existing = modelsets.get(NAME, models_dir)
        if not existing.missing_files():
            return existing
    except modelsets.ModelSetError:
        pass

    from converters import convert

    outdir = models_dir / NAME
    outdir.mkdir(parents=True, exist_ok=True)
    target = convert(CHECKPOINTS / "target", outdir=outdir, name="demo-target", types=("bf16", "mxfp4"), force=True)
    draft = convert(CHECKPOINTS / "draft", outdir=outdir, name="demo-draft", types=("mxfp4",), force=True)
    levels = [
        modelsets.Level("target", target["bf16"]),
        modelsets.Level("mxfp4", target["mxfp4"]),
        modelsets.Level("draft", draft["mxfp4"]),
    ]
    _, default = modelsets.list_sets(models_dir)
    return modelsets.register(NAME, levels, make_default=default is None, models_dir=models_dir)


def model_set_or_demo(name: str | None = None, say=print) -> modelsets.ModelSet:
    """The named or default model set; with none registered yet, the bundled demo set, converted on first
    use (every command that needs a model set starts the same way on a fresh machine)."""
    if name is None and not modelsets.list_sets()[0]:
        say("No model set registered: preparing the bundled demo set (a toy trained for benchmarks)…")
        return ensure_demo_set()
    return modelsets.get(name)
