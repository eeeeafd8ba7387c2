"""List, remove and choose model sets: the chains of GGUF files (target first, then each cheaper draft)
that `assistant chat`, `generate` and `bench` run. `assistant pull` and `assistant convert` add them."""

from __future__ import annotations

import sys
import textwrap

HELP = "list model sets, remove one, choose the default, or run a set's target on another machine"


def add_arguments(parser):
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.add_parser("list", help="list model sets with their levels, files and sizes (the default action)")
    remove = sub.add_parser("remove", help="unregister a model set")
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--delete-files", action="store_true",
                        help="also delete its GGUF files that no other model set uses")
    default = sub.add_parser("default", help="make NAME the model set used when none is named")
    default.add_argument("name", metavar="NAME")
    remote = sub.add_parser("remote", help="run NAME's target on another machine (where `assistant rpc-server` "
                            "runs), the drafters here; `off` brings it back",
                            description="The BF16 target is the largest level: with `assistant rpc-server` on a "
                            "machine with the memory for it, this set keeps its MXFP4 copy and small draft here and "
                            "sends each verification there. The RPC protocol has no authentication: use it only on "
                            "a network you trust.")
    remote.add_argument("name", metavar="NAME", help="the model set (see `assistant models list`)")
    remote.add_argument("endpoint", metavar="HOST:PORT[,...]|off", help="the ggml-rpc-server's address "
                        "(several, comma-separated, share the target's layers), or `off`")


def run(args) -> int:
    action = getattr(args, "action", None) or "list"
    if action == "remove":
        remove(args.name, args.delete_files)
    elif action == "default":
        from assistant import modelsets

        modelsets.set_default(args.name)
        print(f"{args.name!r} is now the default model set")
    elif action == "remote":
        from assistant import modelsets

        endpoint = None if args.endpoint == "off" else args.endpoint
        modelsets.set_target_rpc(args.name, endpoint)
        print(f"model set {args.name!r}: the target runs " + (f"on the RPC server at {endpoint}" if endpoint
                                                                else "on this machine"))
    else:
        list_sets()
    return 0


def list_sets(out=None) -> None:
    from assistant import home, modelsets
    from assistant.diskspace import format_size
    from assistant.engine import memory

    out = out or sys.stdout
    sets, default = modelsets.list_sets()
    if not sets:
        print(f"no model sets in {home.models_dir()}: add one with `assistant pull REPO_ID` or "
              "`assistant convert CHECKPOINT`", file=out)
        return
    for model_set in sets:
        total = sum(level.size_bytes for level in model_set.levels)
        marker = "* " if model_set.name == default else "  "
        note = "  (default)" if model_set.name == default else ""
        print(f"{marker}{model_set.name}  {len(model_set.levels)} levels, {format_size(total)}{note}", file=out)
        if model_set.description:
            print(textwrap.fill(model_set.description, width=100, initial_indent="    ", subsequent_indent="    ",
                                break_on_hyphens=False, break_long_words=False), file=out)
        stale = model_set.stale_levels()
        for number, level in enumerate(model_set.levels):
            size = format_size(level.size_bytes) if level.path.exists() else "MISSING"
            projection = level.output_projection()
            note = f"  (output projection {projection})" if projection else ""
            if level in stale:
                note += "  (STALE: made from an earlier target; `assistant draft` makes it again)"
            elif level.made_from:
                note += "  (made from the target by `assistant draft`)"
            print(f"    {number}  {level.role:<7} {size:>9}  {level.path}{note}", file=out)
        if model_set.target_rpc:
            print(f"    the target runs on the RPC server at {model_set.target_rpc}", file=out)
        if not model_set.missing_files():
            paths = [level.path for level in model_set.levels][1 if model_set.target_rpc else 0:]
            print(f"    needs {format_size(memory.set_need(paths, memory.DEFAULT_CTX))} of memory here at "
                  f"{memory.DEFAULT_CTX} tokens of context", file=out)


def remove(name: str, delete_files: bool, out=None) -> None:
    from assistant import modelsets

    out = out or sys.stdout
    model_set = modelsets.get(name)
    doomed = modelsets.deletable_files(model_set) if delete_files else []
    modelsets.remove(name, delete_files=delete_files)
    print(f"removed model set {name!r}", file=out)
    for path in doomed:
        print(f"  deleted {path}", file=out)
    for level in model_set.levels:
        if delete_files and level.path.resolve() not in doomed and level.path.exists():
            print(f"  kept {level.path} (used by another model set or outside the models directory)", file=out)
    new_default = modelsets.list_sets()[1]
    if new_default:
        print(f"default model set: {new_default}", file=out)
