"""Generate an answer for one prompt with multi-level speculative decoding, streaming it to stdout.

The prompt comes from the argument, --prompt-file, or stdin; it is sent as a user message through the
target's chat template unless --raw is given. Files attached with -f go before it, each as a fenced block
under its path (the system message tells the model which files they are). Models come from a registered model set (--model-set,
default: the default set) or explicit GGUF paths (--target, then --draft once per lower level).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from assistant.errors import AssistantError

HELP = "generate an answer for one prompt (speculative decoding, streamed to stdout)"


def add_arguments(parser):
    parser.add_argument("prompt", nargs="?", help="the prompt; '-' or nothing reads stdin")
    parser.add_argument("-f", "--file", action="append", default=[], metavar="PATH",
                        help="attach this file (repeatable): its text goes into the prompt under its path, e.g. "
                             "`assistant generate -f app.py \"add type hints\"`")
    parser.add_argument("--prompt-file", metavar="PATH", help="read the prompt itself from this file")
    parser.add_argument("--raw", action="store_true", help="continue the prompt text as is, without the chat template")
    parser.add_argument("--system", help="a system message to put before the prompt")
    models = parser.add_argument_group("models")
    models.add_argument("-m", "--model-set", help="registered model set to use (default: the default set)")
    models.add_argument("--target", help="target GGUF file (instead of a model set)")
    models.add_argument("--draft", action="append", default=[], help="draft GGUF below the previous level (repeatable)")
    models.add_argument("--levels", type=int, help="use only the first N levels (1 = the target alone)")
    models.add_argument("--ngram", action=argparse.BooleanOptionalAction, default=None,
                        help="add the prompt-lookup n-gram drafter as the lowest level (default: with "
                             "--draft-length adaptive and two or more models; the policy keeps it where it pays)")
    models.add_argument("--draft-length", default="adaptive",
                        help="tokens drafted per verification: a number (every level takes part, each drafting "
                             "that many) or 'adaptive' (default: before each verification the policy picks which "
                             "levels take part and how much each drafts, from measured costs and acceptance)")
    models.add_argument("--target-rpc", metavar="HOST:PORT[,...]", help="run the target on the machine where "
                        "ggml-rpc-server listens at HOST:PORT (the drafters stay here; default: the model set's, "
                        "see `assistant models remote`); several, comma-separated, share its layers (by free "
                        "memory, or HOST:PORT=SHARE each); the RPC protocol has no authentication: keep it on a "
                        "trusted network")
    models.add_argument("--ctx", type=int, help="context size in tokens (default 4096, less where memory is short)")
    models.add_argument("--threads", type=int, help="llama.cpp threads (default: physical cores)")
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument("--greedy", action="store_true", help="always take the most likely token (the default)")
    sampling.add_argument("--temp", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    sampling.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1.0 = off)")
    sampling.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0 = off)")
    sampling.add_argument("--seed", type=int, help="random seed for sampling: the same seed gives the same answer, "
                          "with any --levels (it is the target's own sample for that seed)")
    constraint = parser.add_argument_group("constrained output").add_mutually_exclusive_group()
    constraint.add_argument("--json-schema", type=Path, metavar="FILE",
                            help="answer with JSON that this JSON schema accepts (held to it at every level, as "
                                 "serve's response_format; keywords a grammar cannot enforce are refused)")
    constraint.add_argument("--grammar", type=Path, metavar="FILE", help="answer in this GBNF grammar (llama.cpp's "
                                                                          "grammar text, start rule 'root')")
    parser.add_argument("-n", "--max-tokens", type=int, default=512, help="most new tokens (default 512)")
    parser.add_argument("--stop", action="append", default=[], help="stop when this text appears (repeatable)")
    parser.add_argument("--stats", action="store_true", help="print per-level statistics to stderr at the end, with the chain shapes "
                        "used (rounds each) and the policy's predicted time per token of every shape")
    parser.add_argument("--json", action="store_true", help="print one JSON line with the text, token ids and stats")


def _grammar(args) -> str | None:
    """The grammar text of --json-schema or --grammar, read (a schema checked and compiled) before anything
    loads; llama.cpp checks a grammar's text against the vocabulary once the target is loaded."""
    import json

    path = args.json_schema or args.grammar
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise AssistantError(f"{path}: cannot read it ({error})") from None
    if args.grammar:
        return text
    from assistant.serve.protocol import ApiError, check_schema
    from assistant.serve.schema_grammar import UnsupportedSchema, schema_grammar

    try:
        schema = json.loads(text)
        if not isinstance(schema, dict):
            raise ValueError("a JSON schema is an object")
        check_schema(schema, "the schema")
        return schema_grammar(schema)
    except ValueError as error:  # JSONDecodeError and UnsupportedSchema are ValueErrors
        where = f" at {error.path}" if isinstance(error, UnsupportedSchema) and error.path else ""
        raise AssistantError(f"{path}: not a JSON schema we can hold answers to{where}: "
                             f"{getattr(error, 'message', error)}") from None
    except ApiError as error:
        raise AssistantError(f"{path}: {error.message}") from None


def run(args) -> int:
    import json
    from dataclasses import asdict

    from assistant.speculative import Pipeline, Sampling
    from converters.progress import Progress

    from assistant import attachments

    grammar = _grammar(args)
    question = _read_prompt(args)
    files = [attachments.read_file(path) for path in args.file]
    prompt = attachments.with_attachments(question, files)
    source = _model_source(args)
    sampling = Sampling(0.0 if args.greedy else args.temp, args.top_k, args.top_p, args.seed)
    draft_length = args.draft_length if args.draft_length == "adaptive" else _positive_int(args.draft_length)
    bar = Progress("loading", 1, show_after=1.0)
    pipeline = Pipeline.load(source, levels=args.levels, n_ctx=args.ctx, threads=args.threads,
                             draft_length=draft_length, ngram=args.ngram, target_rpc=args.target_rpc,
                             progress=bar.moved_to)
    bar.finish()
    with pipeline:
        if args.raw:
            answer = pipeline.generate(raw_prompt_tokens(pipeline.target, question, files), sampling,
                                       args.max_tokens, args.stop, grammar=grammar)
        else:
            messages = attachments.system_messages(args.system, attachments.system_note(files))
            answer = pipeline.chat(messages + [{"role": "user", "content": prompt}], sampling, args.max_tokens, args.stop,
                                   grammar=grammar)
        if args.json:
            answer.finish()
            print(json.dumps({"text": answer.text, "tokens": answer.tokens, "levels": answer.levels,
                              "roles": pipeline.roles, "stats": asdict(answer.stats)}))
        else:
            for event in answer:
                sys.stdout.write(event.text)
                sys.stdout.flush()
            sys.stdout.write("\n")
        if args.stats:
            print(format_stats(answer.stats), file=sys.stderr)
    return 0


def format_stats(stats) -> str:
    after = stats.seconds - stats.prompt_seconds
    lines = [f"{stats.new_tokens} tokens in {stats.seconds:.2f} s: {stats.tokens_per_second:.1f} tokens/s "
             f"(prompt {stats.prompt_tokens} tokens, {stats.cached_tokens} cached, in {stats.prompt_seconds:.2f} s, "
             f"first token at {stats.first_token_seconds:.2f} s, then "
             f"{stats.new_tokens / after if after > 0 else 0.0:.1f} tokens/s; stopped: {stats.stop_reason})"]
    for index, level in enumerate(stats.levels):
        share = level.seconds / stats.seconds if stats.seconds else 0.0
        if index == 0:
            lines.append(f"  level 0 {level.role:>8}: {share:6.1%} of the time")
        else:
            lines.append(f"  level {index} {level.role:>8}: {share:6.1%} of the time, proposed {level.proposed}, "
                         f"accepted {level.accepted} (alpha {level.acceptance:.1%}), tau {level.mean_accepted_length:.2f}")
    if stats.shapes:
        lines.append("  chain shapes (target rounds): "
                     + ", ".join(f"{shape} {rounds}" for shape, rounds in stats.shapes.items()))
    if stats.predicted:
        lines.append("  predicted ms per token: "
                     + ", ".join(f"{shape} {seconds * 1000:.1f}" for shape, seconds in stats.predicted.items()))
    return "\n".join(lines)


def raw_prompt_tokens(model, question: str, files) -> list[int]:
    """--raw: whoever writes the prompt writes its format, control tokens included; attached files are
    plain text to the tokenizer all the same."""
    from assistant import attachments

    if not files:
        return model.tokenize(question, add_special=True, parse_special=True)
    blocks = attachments.with_attachments("", files)  # the blocks and the blank line before the question
    return (model.tokenize(blocks, add_special=True, parse_special=False)
            + model.tokenize(question, add_special=False, parse_special=True))


def _read_prompt(args) -> str:
    if args.prompt_file:
        if args.prompt not in (None, "-"):
            raise AssistantError("give the prompt either as an argument or with --prompt-file, not both")
        try:
            with open(args.prompt_file, encoding="utf-8") as handle:
                return handle.read()
        except OSError as error:
            raise AssistantError(f"{args.prompt_file}: cannot read the prompt ({error.strerror})") from None
        except UnicodeDecodeError:
            raise AssistantError(f"{args.prompt_file}: the prompt file is not UTF-8 text") from None
    if args.prompt not in (None, "-"):
        return args.prompt
    if sys.stdin is None or (args.prompt is None and sys.stdin.isatty()):
        raise AssistantError("no prompt: give it as an argument, with --prompt-file, or on stdin")
    return sys.stdin.read()


def _model_source(args):
    if args.target:
        if args.model_set:
            raise AssistantError("give either --model-set or --target/--draft, not both")
        return [args.target, *args.draft]
    if args.draft:
        raise AssistantError("--draft needs --target (the level it drafts for)")
    from assistant import modelsets
    from assistant.demo import model_set_or_demo

    try:
        return model_set_or_demo(args.model_set, say=lambda text: print(text, file=sys.stderr, flush=True))
    except modelsets.ModelSetError as error:
        raise AssistantError(str(error)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise AssistantError(f"--draft-length must be a number or 'adaptive', not {text!r}") from None
    if value < 1:
        raise AssistantError(f"--draft-length must be 1 or more, not {value}")
    return value
