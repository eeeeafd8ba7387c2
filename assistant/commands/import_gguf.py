"""Import a GGUF file you already have (from ollama, LM Studio or anywhere llama.cpp models come from) and
register it as a model set. By default the file is the target as it is, weights untouched and left where it
is, with an MXFP4 copy written beside it where the copy reads at least 1.5x fewer bytes (a Q8_0 or 16-bit file;
a 4-bit file such as Q4_K_M is about the copy's size, so it gets none). `--target bf16` upcasts the weights
into a BF16 target and its MXFP4 copy instead (the demo's layout: the speculative chain's fastest format, at the
source's quality). `--draft` adds a small model of the same tokenizer below them.

examples:
  assistant import ~/Downloads/qwen2.5-coder-1.5b-instruct-q8_0.gguf
  assistant import ollama:qwen2.5-coder:7b --draft ~/models/qwen2.5-coder-0.5b-instruct-q8_0.gguf
  assistant import ~/.lmstudio/models/lmstudio-community/Qwen2.5-Coder-7B-Instruct-GGUF/Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf --name qwen-coder-7b
  assistant import SmolLM2-135M-Instruct.Q4_1.gguf --target bf16      (OLLAMA_MODELS moves ollama's store)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from assistant.commands.convert import add_output_arguments, after_registering, output_types, report_and_register

HELP = "register a GGUF file (a path, or ollama:NAME[:TAG]) as a model set's target, as it is or upcast to BF16"


def add_arguments(parser):
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "source",
        help="a .gguf file (F32, F16, BF16, Q8_0, Q4_0/Q4_1/Q5_0/Q5_1, Q2_K..Q6_K, MXFP4), or ollama:NAME[:TAG] "
        "for a model ollama has pulled (LM Studio's files are plain paths under ~/.lmstudio/models or "
        "~/.cache/lm-studio/models)",
    )
    parser.add_argument("--target", choices=("as-is", "bf16"), default="as-is",
                        help="as-is (default): the file itself is the target, run by our kernels where its type "
                        "has them, else by llama.cpp's; bf16: upcast into a BF16 target and its MXFP4 copy")
    parser.add_argument("--copy", choices=("auto", "yes", "no"), default="auto",
                        help="with --target as-is: write the MXFP4 copy (auto: where it reads at least 1.5x fewer "
                        "bytes than the target)")
    parser.add_argument("--draft", action="append", default=[], type=Path, metavar="FILE.gguf",
                        help="a small model with the target's tokenizer, any type, as the level below "
                        "(repeatable, largest first)")
    add_output_arguments(parser, name_default="the file's general.name, else its file name")
    parser.set_defaults(types=None)


def run(args) -> int:
    import logging

    from assistant.engine.gguf_header import read_header

    logging.getLogger("gguf").setLevel(logging.ERROR)
    drafts = [checked_draft(path) for path in args.draft]
    if args.target == "bf16":
        from converters.gguf_import import import_gguf
        from converters.output_projection import DEFAULT

        if args.types is None:
            args.types = "bf16,mxfp4"
        if drafts:  # the upcast keeps the source's vocabulary: checked before anything is written
            read_header(locate_source(args.source))
            check_vocabularies(locate_source(args.source), drafts)
        written = import_gguf(args.source, outdir=args.outdir, name=args.name, types=output_types(args),
                              force=args.force, mxfp4_output=args.mxfp4_output or DEFAULT)
        first = next(iter(written))
        name = written[first].name.removesuffix(f".{first}.gguf")
        report_and_register(name, written, register=not args.no_register, drafts=drafts)
        after_registering(args, name)
        return 0
    after_registering(args, keep(args, drafts))
    return 0


def keep(args, drafts: list[Path]) -> str:
    """--target as-is: the file registered in place, with its copy where one pays; the set's name."""
    from assistant import modelsets
    from assistant.engine.gguf_header import read_header
    from assistant.errors import AssistantError
    from converters.gguf_import import keep_as_target
    from converters.output_projection import DEFAULT

    if args.types is not None:
        raise AssistantError("--types applies to --target bf16; with the file as it is, --copy says whether an "
                             "MXFP4 copy is written")
    read_header(locate_source(args.source))  # a damaged file is refused before the vocabularies are read
    if drafts:
        check_vocabularies(locate_source(args.source), drafts)
    kept = keep_as_target(args.source, outdir=args.outdir, name=args.name, force=args.force,
                          copy={"auto": None, "yes": True, "no": False}[args.copy],
                          mxfp4_output=args.mxfp4_output or DEFAULT)
    levels = [modelsets.Level("target", kept.target)]
    if kept.copy is not None:
        levels.append(modelsets.Level("mxfp4", kept.copy))
    levels += [modelsets.Level("draft", path) for path in drafts]
    description = f"{kept.target.name} as it is; {'an' if kept.copy else 'no'} MXFP4 copy: {kept.reason}."
    summary = f"target {kept.target} as it is ({kept.target.stat().st_size / 1e6:,.1f} MB)"
    summary += f", wrote {kept.copy} ({kept.copy.stat().st_size / 1e6:,.1f} MB)" if kept.copy else ", no MXFP4 copy"
    if not args.no_register:
        try:
            modelsets.register(kept.name, levels, description=description)
        except modelsets.ModelSetError as error:
            if kept.copy is not None:
                kept.copy.unlink(missing_ok=True)
            raise AssistantError(str(error)) from None
        summary += f"; registered model set {kept.name!r} ({' -> '.join(level.role for level in levels)})"
    print(summary)
    print(f"  ({kept.reason})")
    return kept.name


def locate_source(source) -> Path:
    from converters.gguf_import import locate

    return locate(source)[0]


def checked_draft(path: Path) -> Path:
    from assistant.engine.gguf_header import read_header

    path = path.expanduser()
    read_header(path)  # missing, not GGUF, truncated: one line naming it
    return path


def check_vocabularies(target: Path, drafts: list[Path]) -> None:
    """Each draft must speak the target's tokenizer: refused in one line naming the draft otherwise."""
    from assistant.engine import Model
    from assistant.speculative.vocab import shared_vocab_size

    models = [Model(path, vocab_only=True) for path in [target, *drafts]]
    try:
        shared_vocab_size(models)
    finally:
        for model in models:
            model.close()
