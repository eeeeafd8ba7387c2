"""Every candidate draft of a model set, measured: the set's own drafts, casts of the target to fewer bits, the
target pruned (reported: without sparse kernels it saves no time), the target and its MXFP4 copy with a trimmed
vocabulary, and blocks dropped by the greedy search on both; each a row with its agreement, cost and the
predicted speedup of target <- it. `assistant draft` adds the best to the set; `bench --drafts` reports them."""

from __future__ import annotations

from pathlib import Path

from assistant.errors import AssistantError


def measured_candidates(model_set, workdir: Path, steps: int, threads: int | None = None, say=lambda text: None,
                        thorough: bool = True, progress=None):
    """(the target's reference text, rows: the target itself first, then every candidate). ``thorough`` False
    (`assistant draft`) tries only what has paid in the bench's tables: the Q4_K_M cast, then the better of the
    MXFP4 copy and that cast with 16k and 32k tokens; no pruning (it costs what the target costs), no trimmed
    16-bit target. ``progress``: a `converters.progress.Steps` whose total this sets; where it shows, it stands in
    for the lines ``say`` would print for each step."""
    from assistant.drafts.agreement import measure, self_written
    from assistant.drafts.pruning import PATTERNS, pruned
    from assistant.drafts.search import CASTS, cast, dropped_blocks
    from assistant.drafts.vocabulary import SIZES as VOCABULARY_SIZES, common_tokens, kept_tokens, trimmed
    from assistant.engine import Model

    target = Path(model_set.levels[0].path)
    workdir.mkdir(parents=True, exist_ok=True)
    with Model(target, vocab_only=True) as model:
        n_vocab = model.n_vocab
    copies = [(level.role, Path(level.path)) for level in model_set.levels[1:] if level.role == "mxfp4"]
    file_types = CASTS if thorough else QUICK_CASTS
    patterns = PATTERNS if thorough else ()
    sizes = [size for size in VOCABULARY_SIZES if size <= n_vocab * 3 // 4  # a quarter of the rows at least
             and (thorough or size >= QUICK_VOCABULARY)]
    trimmings = (1 + len(copies) + len(file_types) if thorough else 1) * len(sizes)
    searches = (1 + len(copies)) * steps
    if progress is not None:
        progress.total = 2 + len(model_set.levels[1:]) + len(file_types) + len(patterns) + trimmings + searches

    def announce(what: str) -> None:
        if progress is not None and progress.enabled:
            progress.step(what)
        else:
            say(f"[draft] {what}")

    announce(f"the target's own text: {target.name}")
    references = self_written(target, threads=threads)
    announce("the target itself")
    itself = measure(target, references, n_vocab, threads, batches=True)
    rows = [_row("the target itself", "", itself, itself, level=0)]
    for index, level in enumerate(model_set.levels[1:], 1):
        announce(f"the set's {level.role}")
        rows.append(_row(f"the set's {level.role}", "", measure(Path(level.path), references, n_vocab, threads),
                         itself, level=index))

    def attempt(method: str, setting: str, make) -> None:
        announce(f"{method} {setting}")
        try:
            path = make()
        except AssistantError as error:  # e.g. a cast or pruning of a target that is quantized already
            say(f"  {error}")
            return
        rows.append(_row(method, setting, measure(path, references, n_vocab, threads), itself))

    casts = []
    for file_type in file_types:
        attempt("cast", file_type, lambda: cast(target, file_type, workdir))
        if rows[-1]["method"] == "cast" and rows[-1]["setting"] == file_type:
            casts.append((file_type, Path(rows[-1]["path"])))
    for pattern in patterns:
        attempt("pruned", pattern, lambda: pruned(target, pattern, workdir / f"{target.stem}.pruned-"
                                                  f"{pattern.replace(':', '-').rstrip('%')}.gguf"))
    order = common_tokens(target) if sizes else None
    trimmed_sources = [("target", target)] + copies + casts if thorough else [
        max(copies + casts, key=lambda source: _predicted(rows, source[1]), default=None)]
    for name, source in [source for source in trimmed_sources if source is not None]:
        for size in sizes:
            attempt(f"{name} vocabulary", str(size), lambda: trimmed(source, kept_tokens(source, order, size),
                                                                     workdir / f"{source.stem}.vocab-{size}.gguf"))
    for name, source in [("target", target)] + copies if steps else ():
        say(f"[draft] greedy block selection on the {name} ({steps} steps)")
        for dropped, measured in dropped_blocks(source, references, n_vocab, workdir, steps, threads, say=say,
                                                step=lambda number: announce(f"{name}: block search, step {number}")):
            rows.append(_row(f"{name} without blocks", ",".join(map(str, sorted(dropped))), measured, itself))
    return references, rows


QUICK_CASTS = ("Q4_K_M",)
QUICK_VOCABULARY = 16384  # the smallest trimmed vocabulary tried without ``thorough``


def _row(method: str, setting: str, measured, itself, level: int | None = None) -> dict:
    """``level``: the candidate's index in the set, where it is one of the set's files already."""
    from assistant.drafts.agreement import predicted_speedup

    speedup, length = predicted_speedup(measured.agreement, measured.seconds_per_token, itself.seconds_per_token,
                                        itself.batch_seconds)
    return {"method": method, "setting": setting, "path": str(measured.path), "size": measured.size,
            "agreement": measured.agreement, "seconds_per_token": measured.seconds_per_token,
            "cost_vs_target": measured.seconds_per_token / itself.seconds_per_token, "level": level,
            "predicted_speedup": speedup, "predicted_length": length}


def _predicted(rows: list[dict], path: Path) -> float:
    return next(row["predicted_speedup"] for row in rows if Path(row["path"]) == path)


def chain_with(model_set, draft: Path, rows: list[dict]) -> list[Path]:
    """The set's files with ``draft`` among its drafts, dearer drafts nearer the target (a level verifies the
    cheaper one below it). A draft of the set whose own predicted speedup under the target is below the new
    one's leaves the chain: measured on the demo set and Gemma 3, a third model level cost more rounds than it
    saved (0.92-0.98x), a better draft in the place of a worse one paid (1.08-1.18x)."""
    predicted = {Path(row["path"]): row for row in rows}
    new = predicted[Path(draft)]
    kept = [Path(level.path) for level in model_set.levels[1:]
            if predicted[Path(level.path)]["predicted_speedup"] >= new["predicted_speedup"]]
    drafts = kept + [Path(draft)]
    return [Path(model_set.levels[0].path), *sorted(drafts, key=lambda path: -predicted[path]["seconds_per_token"])]
