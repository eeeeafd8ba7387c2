"""Shared test set-up. Fixtures live in ``tests/fixtures/`` modules, one per area, loaded here."""

import signal

import pytest

# Tests press Ctrl-C on the commands they start (convert, pull, serve). A run started in the background by a
# non-interactive shell (nohup, `cmd &`, some CI runners) inherits SIGINT ignored, and so would every command
# it starts, which would then finish instead of stopping. A handler here is reset to the default on exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = [
    "tests.fixtures.home",
    "tests.fixtures.checkpoints",
    "tests.fixtures.models",
    "tests.fixtures.hub",
    "tests.fixtures.chat",
    "tests.fixtures.serve",
]


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow") or config.getoption("-m"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow or -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
