"""A conversation as a Markdown document, to keep or share outside the app."""

from __future__ import annotations

import re
import time
from pathlib import Path

from assistant import home
from assistant.conversation.store import Conversation, Message

HEADINGS = {"user": "You", "assistant": "Assistant", "error": "Error"}


def to_markdown(conversation: Conversation, messages: list[Message]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(conversation.created_at))
    parts = [f"# {conversation.title}", "", f"*{when}" + (f", model set `{conversation.model_set}`*" if conversation.model_set else "*")]
    if conversation.system_prompt:
        parts += ["", "## System", "", conversation.system_prompt]
    for message in messages:
        heading = HEADINGS.get(message.role, message.role.title())
        if not message.complete and message.role == "assistant":
            heading += " (stopped)"
        parts += ["", f"## {heading}", "", message.content.rstrip()]
    return "\n".join(parts) + "\n"


def export_path(conversation: Conversation, directory: Path | None = None) -> Path:
    """``<data dir>/exports/<id>-<title-slug>.md``: stable, so exporting again overwrites the same file."""
    directory = directory or home.data_dir() / "exports"
    directory.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", conversation.title.lower()).strip("-")[:40] or "chat"
    return directory / f"{conversation.id}-{slug}.md"


def export(conversation: Conversation, messages: list[Message], directory: Path | None = None) -> Path:
    path = export_path(conversation, directory)
    path.write_text(to_markdown(conversation, messages))
    return path
