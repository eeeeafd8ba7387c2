"""Download a Hugging Face model and make it a ready model set: the BF16 target, its MXFP4 copy and, with
--draft, a small draft model converted to MXFP4. Only the files conversion reads are downloaded; an
interrupted pull resumes where it stopped. Gated models need HF_TOKEN or `hf auth login`."""

from __future__ import annotations

import re
import sys

from assistant.errors import AssistantError

HELP = "download a Hugging Face model, convert it and register it as a model set"

# The BF16 file is about the size of a BF16 checkpoint; the MXFP4 copy is a quarter of that, up to a half for
# copies whose output projection stays BF16 (--mxfp4-output). Plan for the upper end so a pull never fails
# half-way for space.
MXFP4_SHARE = 0.5
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def add_arguments(parser):
    parser.add_argument("repo_id", metavar="REPO_ID", help="the model repository, e.g. Qwen/Qwen2.5-Coder-7B-Instruct")
    parser.add_argument("--revision", help="branch, tag or commit of REPO_ID (default: main)")
    parser.add_argument("--draft", metavar="REPO_ID", help="a small model of the same tokenizer, used as the lowest level")
    parser.add_argument("--name", help="name of the model set (default: the repository name, lower-cased)")
    parser.add_argument("--force", action="store_true", help="overwrite GGUF files of the same name")


def run(args) -> int:
    pull(args.repo_id, revision=args.revision, draft=args.draft, name=args.name, force=args.force)
    return 0


def set_name(repo_id: str) -> str:
    return repo_id.rstrip("/").split("/")[-1].lower()


def pull(repo_id: str, revision: str | None = None, draft: str | None = None, name: str | None = None,
         force: bool = False, out=None):
    """Plan, check space, download, convert, register; returns the registered ModelSet."""
    from assistant import diskspace, home, hub, modelsets
    from assistant.diskspace import format_size

    out = out or sys.stdout
    name = name or set_name(repo_id)
    if not NAME_PATTERN.fullmatch(name):
        raise AssistantError(f"--name {name!r}: use letters, digits, '.', '_' and '-' (starting with a letter or digit)")
    sets, _ = modelsets.list_sets()
    if any(s.name == name for s in sets):
        raise AssistantError(
            f"model set {name!r} already exists: remove it with `assistant models remove {name} --delete-files` "
            "or choose another --name"
        )
    models_dir = home.models_dir()

    print(f"pulling {repo_id}" + (f" at {revision}" if revision else ""), file=out)
    if draft is None and hub.known_draft(repo_id):
        suggestion = hub.known_draft(repo_id)
        print(f"tip: {suggestion} is a known small draft for it; add --draft {suggestion} for a faster three-level set",
              file=out)
    target_plan = hub.plan(repo_id, revision)

    draft_file = draft_plan = None
    if draft is not None:
        draft_file = models_dir / f"{set_name(draft)}.mxfp4.gguf"
        in_use = {lv.path.resolve() for s in sets for lv in s.levels}
        if draft_file.resolve() in in_use and draft_file.exists():
            print(f"draft {draft}: reusing {draft_file}", file=out)
        else:
            draft_plan = hub.plan(draft)

    outputs_planned = [models_dir / f"{name}.bf16.gguf", models_dir / f"{name}.mxfp4.gguf"]
    if draft_plan is not None:
        if set_name(draft) == name:
            raise AssistantError(f"the draft {draft} and the model set {name!r} would share file names: choose another --name")
        outputs_planned.append(draft_file)
    for path in outputs_planned:
        if path.exists() and not force:
            raise AssistantError(f"{path}: already exists; pass --force to overwrite it")

    plans = [p for p in (target_plan, draft_plan) if p is not None]
    download_bytes = sum(p.download_bytes for p in plans)
    cached_bytes = sum(f.size for p in plans for f in p.files if f.cached)
    conversion_bytes = int(target_plan.weights_bytes * (1 + MXFP4_SHARE))
    if draft_plan is not None:
        conversion_bytes += int(draft_plan.weights_bytes * MXFP4_SHARE)
    print(f"download {format_size(download_bytes)} ({format_size(cached_bytes)} already here), "
          f"conversion writes up to {format_size(conversion_bytes)}", file=out)
    diskspace.require(
        {hub.cache_dir(): ("download", download_bytes), models_dir: ("conversion", conversion_bytes)},
        f"pulling {repo_id}",
    )

    from converters import check_metadata, convert

    for plan in plans:  # everything but the weights first: a repository conversion refuses costs no gigabytes
        check_metadata(hub.download(plan, out=out, weights=False))
    directories = []
    for plan in plans:
        print(f"downloading {plan.repo_id} (commit {plan.commit[:12]})", file=out, flush=True)
        directories.append(hub.download(plan, out=out))
    print(f"downloaded files stay in {hub.cache_dir()} (free them with `hf cache rm model/{repo_id}`)", file=out)

    created = []
    try:
        outputs = convert(directories[0], outdir=models_dir, name=name, types=("bf16", "mxfp4"), force=force)
        created += outputs.values()
        levels = [modelsets.Level("target", outputs["bf16"]), modelsets.Level("mxfp4", outputs["mxfp4"])]
        if draft_plan is not None:
            draft_outputs = convert(directories[1], outdir=models_dir, name=set_name(draft), types=("mxfp4",),
                                    force=force)
            created += draft_outputs.values()
            draft_file = draft_outputs["mxfp4"]
        if draft_file is not None:
            levels.append(modelsets.Level("draft", draft_file))
        model_set = modelsets.register(name, levels)
    except BaseException:
        for path in created:  # a failed pull leaves no GGUF that no model set lists
            path.unlink(missing_ok=True)
        raise

    default = modelsets.list_sets()[1] == name
    print(f"model set {name!r} is ready" + (" (the default)" if default else
          f"; make it the default with `assistant models default {name}`"), file=out)
    for level in model_set.levels:
        print(f"  {level.role:<7} {format_size(level.size_bytes):>9}  {level.path}", file=out)
    return model_set
