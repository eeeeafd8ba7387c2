"""Make a draft for a model set from its target's own weights: casts to fewer bits (and, with --steps, blocks
dropped by a greedy search), each measured for agreement with text the target writes itself and for its cost
per token on this machine. The candidate with the best predicted speed of target <- it joins the set as a level
(the adaptive policy still decides, round by round, whether to use it), unless no candidate beats the set's own
drafts. A set keeps one such draft: a better one replaces it, and one made from an earlier version of the target
is dropped before measuring. `assistant bench --drafts SET` shows the whole table."""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path

from assistant.errors import AssistantError

HELP = "make a draft for a model set from its target's own weights, measured on this machine"


def add_arguments(parser):
    parser.add_argument("model_set", nargs="?", metavar="SET", help="the model set (default: the default set)")
    parser.add_argument("--steps", type=int, default=0, metavar="N",
                        help="also try dropping up to N blocks, one a step, by measured agreement (slow: every "
                             "block is tried at each step; default 0)")
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: physical cores)")
    parser.add_argument("--dry-run", action="store_true", help="measure and report, change nothing")


def run(args) -> int:
    if args.steps < 0:
        raise AssistantError(f"--steps must be 0 or more, not {args.steps}")
    return make(args.model_set, args.steps, args.threads, args.dry_run)


def make(set_name: str | None, steps: int = 0, threads: int | None = None, dry_run: bool = False) -> int:
    """Measure the candidates for the set ``set_name`` (None: the default set) and add the best (see above)."""
    from assistant import home, modelsets
    from assistant.drafts.candidates import chain_with, measured_candidates
    from converters.progress import Steps

    model_set = modelsets.get(set_name)
    missing = model_set.missing_files()
    if missing:
        raise AssistantError(f"model set {model_set.name!r}: missing file {missing[0]}")
    stale = model_set.stale_levels()
    measured_set = dataclasses.replace(model_set, levels=[level for level in model_set.levels if level not in stale])
    target = model_set.target.path
    made_from = modelsets.fingerprint(target)
    progress = Steps(f"draft {model_set.name}", 1)

    def say(text: str) -> None:  # over the bar's line where one shows
        print("\r" + text.ljust(118) if progress.enabled else text, file=sys.stderr, flush=True)

    for level in stale:
        say(f"[draft] {level.path.name} was made from an earlier version of {target.name}: left out")
    with tempfile.TemporaryDirectory(prefix="assistant-draft-", dir=home.models_dir()) as scratch:
        _, rows = measured_candidates(measured_set, Path(scratch), steps, threads, say=say, thorough=False,
                                      progress=progress)
        progress.finish()
        for row in rows[1:]:
            say(f"  {row['method']} {row['setting']}".rstrip() + f": agreement {row['agreement']:.3f}, cost "
                f"{row['cost_vs_target']:.2f}x the target's, predicted {row['predicted_speedup']:.2f}x")
        best = max(rows[1:], key=lambda row: row["predicted_speedup"], default=None)
        if best is None or best["level"] is not None or best["predicted_speedup"] <= 1.0:
            beaten = "its own drafts" if best is not None and best["predicted_speedup"] > 1.0 else "the target alone"
            print(f"no new draft for {model_set.name!r}: no candidate beats {beaten}")
            if stale and not dry_run:
                _register(model_set, measured_set.levels)
                _delete(stale, home.models_dir())
                print(f"removed the stale draft {stale[0].path.name} from {model_set.name!r}")
            return 0
        name = f"{best['method']} {best['setting']}".strip()
        if dry_run:
            print(f"{model_set.name!r} would gain {name} ({best['size'] / 1e6:.1f} MB, predicted "
                  f"{best['predicted_speedup']:.2f}x the target alone)")
            return 0
        kept = home.models_dir() / model_set.name / f"{target.stem}.draft-{_slug(name)}.gguf"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(best["path"], kept)
    replaced = [level for level in measured_set.levels[1:] if level.made_from]  # one made draft a set
    kept_levels = [level for level in measured_set.levels if level not in replaced]
    rows = [row for row in rows if row is not best] + [{**best, "path": str(kept)}]
    roles = {level.path: level.role for level in kept_levels}
    role = "draft" if "draft" not in roles.values() else f"draft-{_slug(name)}"
    made = modelsets.Level(role, kept, made_from)
    by_path = {level.path: level for level in kept_levels} | {kept: made}
    reduced = dataclasses.replace(model_set, levels=kept_levels)
    levels = [by_path[path] for path in chain_with(reduced, kept, rows)]
    left = [level for level in kept_levels[1:] if level not in levels]
    _register(model_set, levels)
    _delete(stale + replaced, home.models_dir(), keep=kept)
    print(f"added {name} to {model_set.name!r} as {role!r} ({kept}, {best['size'] / 1e6:.1f} MB): agreement "
          f"{best['agreement']:.3f}, predicted {best['predicted_speedup']:.2f}x the target alone; levels now "
          f"{' -> '.join(level.role for level in levels)}")
    for level in stale + replaced:
        if level.path.resolve() != kept.resolve():
            print(f"  it replaces {level.path.name}")
    for level in left:
        print(f"  {level.role} ({level.path.name}) leaves the chain: target <- the new draft is predicted faster "
              f"(its file stays: {level.path})")
    return 0


def _register(model_set, levels) -> None:
    from assistant import modelsets

    _, default = modelsets.list_sets()
    modelsets.register(model_set.name, levels, make_default=default == model_set.name,
                       description=model_set.description)


def _delete(levels, models_dir: Path, keep: Path | None = None) -> None:
    """The files of drafts this command made earlier and the set no longer uses (ours, in the models directory)."""
    for level in levels:
        path = level.path.resolve()
        if path != (keep and keep.resolve()) and path.is_relative_to(models_dir.resolve()):
            path.unlink(missing_ok=True)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
