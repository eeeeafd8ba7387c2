"""The `assistant` entry point as a user meets it: help, version, the default command, errors."""

import subprocess
import sys

from assistant import __version__
from assistant.cli import COMMANDS, with_default_command


def assistant(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "assistant", *args], capture_output=True, text=True, **kwargs)


def test_help_lists_every_subcommand_with_a_description():
    result = assistant("--help")
    assert result.returncode == 0
    for name in COMMANDS:
        line = next(line for line in result.stdout.splitlines() if line.strip().startswith(name + " "))
        assert len(line.split()) > 2, f"{name} has no one-line description"


def test_version():
    result = assistant("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"assistant {__version__}"


def test_bare_assistant_opens_the_chat():
    assert with_default_command([]) == ["chat"]
    assert with_default_command(["--model-set", "x"]) == ["chat", "--model-set", "x"]
    assert with_default_command(["doctor"]) == ["doctor"]
    assert with_default_command(["--help"]) == ["--help"]
