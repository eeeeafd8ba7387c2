"""`assistant` and its subcommands. Each command is a module in ``assistant.commands`` with a one-line
``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; heavy imports stay inside ``run`` so that
``assistant --help`` is instant."""

from __future__ import annotations

import argparse
import importlib
import sys

from assistant import __version__
from assistant.errors import AssistantError

COMMANDS = ("chat", "generate", "serve", "convert", "import", "pull", "draft", "models", "bench", "doctor",
            "rpc-server")
DEFAULT_COMMAND = "chat"
MODULES = {"import": "import_gguf"}  # a command whose name is a Python keyword


class CommandListFormatter(argparse.HelpFormatter):
    """argparse measures the command names without their indentation, so the longest (rpc-server) would have
    its description pushed to the next line: count the indentation in."""

    def add_argument(self, action):
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction):
            self._action_max_length += self._indent_increment


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="assistant",
        description="A local, offline coding assistant. Answers come from a BF16 model, sped up by "
        "multi-level speculative decoding (small draft -> MXFP4 copy -> BF16 target). "
        "Bare `assistant` opens the chat.",
        epilog="Run `assistant COMMAND --help` for the options of one command.",
        formatter_class=CommandListFormatter,
    )
    parser.add_argument("--version", action="version", version=f"assistant {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"assistant.commands.{MODULES.get(name, name.replace('-', '_'))}")
        command = sub.add_parser(name, help=module.HELP, description=module.__doc__)
        module.add_arguments(command)
        command.set_defaults(handler=module.run)
    return parser


def with_default_command(argv: list[str]) -> list[str]:
    """Bare `assistant` (or `assistant --some-chat-option`) means `assistant chat`."""
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        return [DEFAULT_COMMAND, *argv]
    return argv


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if getattr(sys, "frozen", False) and len(argv) == 1:  # perhaps its remote-target worker (engine/remote.py)
        from assistant.engine import remote

        if argv == [remote.WORKER_FLAG]:
            remote.work()
            return 0
    argv = with_default_command(argv)
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except AssistantError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
