"""Placeholder: `assistant bench` is being built (see the issue tracker)."""

from assistant.errors import AssistantError

HELP = "(not built yet)"


def add_arguments(parser):
    pass


def run(args) -> int:
    raise AssistantError("`assistant bench` is not built yet")
