"""Where the user's data lives: models, the conversation database and the config file.

One directory, the platform's standard place, overridable with ``ASSISTANT_HOME`` (every test sets it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


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
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    path = data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def database_path() -> Path:
    return data_dir() / "conversations.sqlite3"


def config_path() -> Path:
    return data_dir() / "config.json"
