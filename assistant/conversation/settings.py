"""The chat's settings, kept under the ``"chat"`` key of the user's config file so they survive restarts.

Other commands may keep their own keys in the same file; saving rewrites only ours, atomically."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from assistant import home
from assistant.attachments import COMMAND_TIMEOUT
from assistant.errors import AssistantError

SECTION = "chat"


@dataclass
class ChatSettings:
    model_set: str | None = None  # None: the registry's default set
    system_prompt: str = ""
    temperature: float = 0.0  # 0 = greedy
    max_tokens: int = 512
    speculation: bool = True  # off: the target alone
    levels: int | None = None  # how many levels of the set to use; None: all of them
    speculation_view: bool = False
    n_ctx: int | None = None  # context tokens; None: 4096, or less where memory is short
    command_timeout: float = COMMAND_TIMEOUT  # seconds a `!` or `/run` command may run before it is stopped
    keymap: dict[str, str] = field(default_factory=dict)  # binding id -> keys, e.g. {"new_chat": "ctrl+t"}

    def level_count(self, available: int) -> int:
        """Levels to load from a set of ``available``: 1 with speculation off, else the chosen count."""
        if not self.speculation:
            return 1
        return max(1, min(available, self.levels or available))


def _read(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise AssistantError(f"{path}: not a readable config file ({error}); fix or delete it") from None
    if not isinstance(data, dict):
        raise AssistantError(f"{path}: the config file must hold a JSON object")
    return data


def load(path: Path | None = None) -> ChatSettings:
    path = path or home.config_path()
    stored = _read(path).get(SECTION, {})
    known = {f.name for f in fields(ChatSettings)}
    settings = ChatSettings(**{key: value for key, value in stored.items() if key in known})
    if not isinstance(settings.keymap, dict):
        settings.keymap = {}
    return settings


def save(settings: ChatSettings, path: Path | None = None) -> None:
    path = path or home.config_path()
    data = _read(path)
    data[SECTION] = asdict(settings)
    partial = path.with_name(path.name + ".part")
    partial.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(partial, path)
