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

from assistant.commands.convert import add_output_arguments, output_types, report_and_register

HELP = "import a GGUF file (a path, or ollama:NAME[:TAG]) as a BF16 target + MXFP4 copy and register it"


def add_arguments(parser):
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "source",
        help="a .gguf file (F32, F16, BF16, Q8_0, Q4_0/Q4_1/Q5_0/Q5_1, Q2_K..Q6_K, MXFP4), or ollama:NAME[:TAG] "
        "for a model ollama has pulled (LM Studio's files are plain paths under ~/.lmstudio/models or "
        "~/.cache/lm-studio/models)",
    )
    add_output_arguments(parser, name_default="the file's general.name, else its file name")


def run(args) -> int:
    import logging

    from converters.gguf_import import import_gguf
    from converters.output_projection import DEFAULT

    logging.getLogger("gguf").setLevel(logging.ERROR)
    written = import_gguf(
        args.source, outdir=args.outdir, name=args.name, types=output_types(args), force=args.force,
        mxfp4_output=args.mxfp4_output or DEFAULT,
    )
    first = next(iter(written))
    report_and_register(written[first].name.removesuffix(f".{first}.gguf"), written, register=not args.no_register)
    return 0
