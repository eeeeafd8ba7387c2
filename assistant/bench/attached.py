"""What the n-gram level is worth when the answer edits an attached file: the same prompts answered with and
without it at the bottom of the chain (adaptive policy both times), alternating, greedy, on one model set.

The prompts attach one of this package's own source files (present wherever the product is installed) and
ask for it back from its first lines on, in the form the demo models were trained on ("Finish this
module:"): an answer that rewrites a file copies long runs of it, which is what prompt lookup drafts for
free. A real instruction model asked to edit a file repeats it the same way."""

from __future__ import annotations

from pathlib import Path

from assistant.bench import pairs
from assistant.bench.summary import geomean
from assistant.errors import AssistantError

PACKAGE = Path(__file__).resolve().parents[1]
HEAD_LINES = 12  # the start of the file given in the request; the model goes on from there
SIZE_RANGE = (2000, 6000)  # bytes: files long enough to copy from, short enough for a 4096-token context


def edit_prompts(count: int) -> list[dict]:
    """``count`` prompts, each attaching one source file of the package and asking for it from its start."""
    from assistant import attachments

    files = sorted(path for path in PACKAGE.rglob("*.py")
                   if SIZE_RANGE[0] <= path.stat().st_size <= SIZE_RANGE[1])[:count]
    if not files:
        raise AssistantError(f"{PACKAGE}: no source files to attach")
    prompts = []
    for path in files:
        name = str(path.relative_to(PACKAGE.parent))
        attached = attachments.read_file(name, PACKAGE.parent)
        head = "".join(attached.content.splitlines(keepends=True)[:HEAD_LINES])
        request = f"Finish this module:\n```python\n{head}```"
        prompts.append({"id": name, "messages": [
            {"role": "system", "content": attachments.system_note([attached], PACKAGE.parent)},
            {"role": "user", "content": attachments.with_attachments(request, [attached])}]})
    return prompts


def measure(model_set, prompts: list[dict], max_tokens: int, threads: int, say=print) -> dict:
    from assistant.speculative import Pipeline

    with Pipeline.load(model_set, threads=threads, ngram=True) as with_ngram, \
            Pipeline.load(model_set, threads=threads, ngram=False) as without:
        if len(with_ngram.roles) == len(without.roles):
            raise AssistantError(f"model set {model_set.name!r}: the n-gram level did not join the chain")
        ways = {"with": lambda messages: pairs.answer_in_process(with_ngram, messages, max_tokens),
                "without": lambda messages: pairs.answer_in_process(without, messages, max_tokens)}
        rows = []
        for prompt, runs in pairs.alternate(prompts, ways):
            last = runs["with"][-1].stats
            ngram = last.levels[-1]
            row = {"id": prompt["id"], "tokens": last.new_tokens, "prompt_tokens": last.prompt_tokens,
                   "with_tps": pairs.tokens_per_second(runs["with"]),
                   "without_tps": pairs.tokens_per_second(runs["without"]),
                   "ngram_proposed": ngram.proposed, "ngram_accepted": ngram.accepted}
            rows.append(row)
            say(f"  {prompt['id']}: {row['tokens']} tokens, with the n-gram level {row['with_tps']:.1f} tokens/s "
                f"(its last run: {ngram.proposed} proposed, {ngram.accepted} accepted), without "
                f"{row['without_tps']:.1f} (medians of {pairs.REPEATS})")
    return {"model_set": model_set.name, "max_tokens": max_tokens, "threads": threads, "repeats": pairs.REPEATS,
            "rows": rows, "with_over_without": geomean([row["with_tps"] / row["without_tps"] for row in rows]),
            "roles_with": with_ngram.roles, "roles_without": without.roles}
