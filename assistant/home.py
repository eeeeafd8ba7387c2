"""Where the user's data lives: models, the conversation database and the config file.

One directory, the platform's standard place, overridable with ``ASSISTANT_HOME`` (every test sets it).
It is private (0700): the conversations in it hold attached files, `.env` files included, and command output.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

PRIVATE_DIRECTORY = 0o700
PRIVATE_FILE = 0o600


def data_dir() -> Path:
    override = os.environ.get("ASSISTANT_HOME")
    if override:
        path = Path(override).expanduser()
    elif sys.platform == "win32":
        path = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "assistant"
    elif sys.platform == "darwin":
        path = Path.home() / "Library" / "Application Support" / "assistant"
    else:
        path = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "assistant"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=PRIVATE_DIRECTORY)
    except FileExistsError:
        make_private(path, PRIVATE_DIRECTORY)
    return path


def make_private(path: Path, mode: int, say: bool = True) -> None:
    """Take group and other access away from a directory or file of ours made before it was private; says so
    once (the next time finds it private). Another user's file, or a filesystem without modes, stays as is."""
    if sys.platform == "win32":
        return
    try:
        current = stat.S_IMODE(path.stat().st_mode)
        if current & 0o077:
            path.chmod(current & mode)
            if say:
                print(f"note: {path} was readable by other users (mode {current:o}); it is now {current & mode:o}",
                      file=sys.stderr)
    except OSError:
        pass


def models_dir() -> Path:
    path = data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def database_path() -> Path:
    return data_dir() / "conversations.sqlite3"


def config_path() -> Path:
    return data_dir() / "config.json"
