"""Shared test set-up. Fixtures live in ``tests/fixtures/`` modules, one per area, loaded here."""

import pytest

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
