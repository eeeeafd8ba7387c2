"""Convert a Hugging Face BF16 safetensors checkpoint to GGUF: the BF16 target and its MXFP4 direct cast,
written to the user's models directory and registered as a model set (target first, then the MXFP4 copy)."""

from __future__ import annotations

from pathlib import Path

HELP = "convert a Hugging Face safetensors checkpoint to GGUF (BF16 target + MXFP4 draft) and register it"
TYPES = ("bf16", "mxfp4", "q8_0", "f16")


def add_arguments(parser):
    parser.add_argument("source", help="a .safetensors file (config.json and tokenizer files beside it) or a checkpoint directory")
    add_output_arguments(parser, name_default="the checkpoint directory's name")


def add_output_arguments(parser, name_default: str) -> None:
    """Where and what to write, as `convert` and `import` both take them."""
    parser.add_argument("--outdir", type=Path, help="where to write the GGUF files (default: the user models directory)")
    parser.add_argument("--name", help=f"model set and file name (default: {name_default})")
    parser.add_argument(
        "--types", default="bf16,mxfp4",
        help=f"comma-separated output types among {', '.join(TYPES)} (default: bf16,mxfp4)",
    )
    parser.add_argument(
        "--mxfp4-output", "--mxfp4-embeddings", dest="mxfp4_output", choices=("bf16", "q8_0", "mxfp4"),
        default=None, help="type of the output projection and token embeddings in the MXFP4 file "
        "(default: mxfp4, measured best: notes/converter.md)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite existing output files")
    parser.add_argument("--no-register", action="store_true", help="write the files without registering a model set")
    parser.add_argument("--make-draft", action="store_true",
                        help="then make a draft from the target's own weights, measured here, as `assistant draft` "
                        "does (about 30 s for a 135M-parameter target, 3 min for a 1B one on 2 cores)")


def after_registering(args, name: str) -> None:
    """With --make-draft, `assistant draft` on the set just registered; else a set with no small draft is told it
    can have one."""
    from assistant import modelsets

    if args.no_register:
        return
    if args.make_draft:
        from assistant.commands.draft import make

        make(name)
    elif not any(level.role.startswith("draft") for level in modelsets.get(name).levels):
        print(f"  (no small draft: `assistant draft {name}` makes one from the target's own weights)")


def output_types(args) -> list[str]:
    from assistant.errors import AssistantError

    types = [t.strip() for t in args.types.split(",") if t.strip()]
    for kind in types:
        if kind not in TYPES:
            raise AssistantError(f"--types: unknown type {kind!r} (choose from {', '.join(TYPES)})")
    return types


def report_and_register(name: str, written: dict[str, Path], register: bool, drafts=()) -> None:
    """Print what was written and, unless told not to, register it as a model set: the first file is the
    target whatever its type, each level below it named by its type, then the ``drafts`` given. A refused
    registration removes the files, so nothing half-made is left."""
    from assistant import modelsets
    from assistant.errors import AssistantError

    sizes = ", ".join(f"{path} ({path.stat().st_size / 1e6:,.1f} MB)" for path in written.values())
    summary = f"wrote {sizes}"
    if register:
        ordered = [kind for kind in TYPES if kind in written]
        levels = [modelsets.Level("target" if i == 0 else kind, written[kind]) for i, kind in enumerate(ordered)]
        levels += [modelsets.Level("draft", Path(path)) for path in drafts]
        try:
            modelsets.register(name, levels)
        except modelsets.ModelSetError as error:
            for path in written.values():
                path.unlink(missing_ok=True)
            raise AssistantError(str(error)) from None
        summary += f"; registered model set {name!r} ({' -> '.join(level.role for level in levels)})"
    print(summary)


def run(args) -> int:
    import logging

    from converters import convert
    from converters.output_projection import DEFAULT
    from converters.pipeline import default_name

    logging.getLogger("gguf").setLevel(logging.ERROR)  # gguf-py's notes on tokenizer quirks are not errors
    written = convert(
        args.source, outdir=args.outdir, name=args.name, types=output_types(args), force=args.force,
        mxfp4_output=args.mxfp4_output or DEFAULT,
    )
    name = args.name or default_name(args.source)
    report_and_register(name, written, register=not args.no_register)
    after_registering(args, name)
    return 0
