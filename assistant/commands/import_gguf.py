"""Import a GGUF file you already have (from ollama, LM Studio or anywhere llama.cpp models come from):
its weights, quantized or not, are dequantized into a BF16 target and its MXFP4 copy, with the tokenizer,
chat template and hyperparameters carried over, and registered as a model set. The target is the source
upcast: a Q4 file imports at Q4 quality, in the format the speculative chain runs fastest.

examples:
  assistant import ~/Downloads/qwen2.5-coder-1.5b-instruct-q8_0.gguf
  assistant import ollama:qwen2.5-coder:1.5b        (OLLAMA_MODELS moves ollama's store)
  assistant import ~/.lmstudio/models/lmstudio-community/Qwen2.5-Coder-7B-Instruct-GGUF/Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf --name qwen-coder-7b
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "import a GGUF file (a path, or ollama:NAME[:TAG]) as a BF16 target + MXFP4 copy and register it"
TYPES = ("bf16", "mxfp4", "q8_0", "f16")


def add_arguments(parser):
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "source",
        help="a .gguf file (F32, F16, BF16, Q8_0, Q4_0/Q4_1/Q5_0/Q5_1, Q2_K..Q6_K, MXFP4), or ollama:NAME[:TAG] "
        "for a model ollama has pulled (LM Studio's files are plain paths under ~/.lmstudio/models or "
        "~/.cache/lm-studio/models)",
    )
    parser.add_argument("--outdir", type=Path, help="where to write the GGUF files (default: the user models directory)")
    parser.add_argument("--name", help="model set and file name (default: the file's general.name, else its file name)")
    parser.add_argument(
        "--types", default="bf16,mxfp4",
        help=f"comma-separated output types among {', '.join(TYPES)} (default: bf16,mxfp4)",
    )
    parser.add_argument(
        "--mxfp4-embeddings", choices=("bf16", "mxfp4"), default=None,
        help="type of the token embeddings and output head in the MXFP4 file (default: bf16, as convert)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite existing output files")
    parser.add_argument("--no-register", action="store_true", help="write the files without registering a model set")


def run(args) -> int:
    import logging

    from assistant import modelsets
    from assistant.errors import AssistantError
    from converters.gguf_import import DEFAULT_MXFP4_EMBEDDINGS, import_gguf

    logging.getLogger("gguf").setLevel(logging.ERROR)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    for kind in types:
        if kind not in TYPES:
            raise AssistantError(f"--types: unknown type {kind!r} (choose from {', '.join(TYPES)})")
    written = import_gguf(
        args.source, outdir=args.outdir, name=args.name, types=types, force=args.force,
        mxfp4_embeddings=args.mxfp4_embeddings or DEFAULT_MXFP4_EMBEDDINGS,
    )
    first = next(iter(written))
    name = written[first].name.removesuffix(f".{first}.gguf")
    sizes = ", ".join(f"{path} ({path.stat().st_size / 1e6:,.1f} MB)" for path in written.values())
    summary = f"wrote {sizes}"
    if not args.no_register:
        ordered = [kind for kind in TYPES if kind in written]
        # the first level is the target whatever its type; below it each level is named by its type
        levels = [modelsets.Level("target" if i == 0 else kind, written[kind]) for i, kind in enumerate(ordered)]
        try:
            modelsets.register(name, levels)
        except modelsets.ModelSetError as error:
            for path in written.values():
                path.unlink(missing_ok=True)
            raise AssistantError(str(error)) from None
        summary += f"; registered model set {name!r} ({' -> '.join(level.role for level in levels)})"
    print(summary)
    return 0
