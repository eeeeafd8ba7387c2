"""What the next message will carry: the pending attachments, their token counts and the context left.

Above the input, hidden while nothing is pending; the chat's ``Attachments`` component owns what is pending
and keeps the bar current. The same descriptions name the attachments under a sent message."""

from __future__ import annotations

from typing import Iterable

from rich.text import Text
from textual.widgets import Static

from assistant.attachments import Attachment
from assistant.conversation.store import StoredAttachment
from assistant.ui.literal import visible

MAX_ROWS = 5  # beyond this the bar says how many more, so the input keeps its place


def describe(attachment: Attachment, dropped: bool = False) -> str:
    """"app.py (12 lines)", "app.py (12 lines, changed: re-read)", "$ pytest -x (exit 1)", "$ yes (stopped)"."""
    if attachment.kind == "command":
        ended = "stopped" if attachment.exit_code is None else f"exit {attachment.exit_code}"
        text = f"$ {attachment.name} ({ended})"
    else:
        lines = len(attachment.content.splitlines())
        changed = ", changed: re-read" if attachment.changed else ""
        text = f"{attachment.name} ({lines} line{'s' if lines != 1 else ''}{changed})"
    return text + (" [dropped]" if dropped else "")


def attachment_line(attached: Iterable[tuple[Attachment, bool]]) -> str:
    """The line under a user's message: each (attachment, dropped) described."""
    described = [describe(attachment, dropped) for attachment, dropped in attached]
    return "Attached: " + " · ".join(described) if described else ""


def lines_by_message(stored: Iterable[StoredAttachment]) -> dict[int, str]:
    """The attachment line under each user message of a saved conversation, by message id."""
    grouped: dict[int, list] = {}
    for attachment in stored:
        grouped.setdefault(attachment.message_id, []).append((attachment.attachment, attachment.dropped))
    return {message_id: attachment_line(items) for message_id, items in grouped.items()}


class AttachmentBar(Static):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.display = False

    def show(self, pending: list[Attachment], tokens: list[int], left: int, n_ctx: int, exact: bool) -> None:
        """List ``pending`` with their ``tokens``; ``left``: what the context holds beyond the conversation so
        far, these attachments and the answer's room (negative: older turns will be left out)."""
        self.display = bool(pending)
        if not pending:
            return
        about = "" if exact else "~"
        text = Text(f"Attached: {about}{sum(tokens):,} tokens · ", style="bold")
        if left >= 0:
            text.append(f"{about}{left:,} of {n_ctx:,} context tokens left")
        else:
            text.append(f"{about}{-left:,} tokens over the {n_ctx:,}-token context: older turns will be left out",
                        style="bold red")
        text.append(" · /drop removes", style="dim")
        for attachment, count in list(zip(pending, tokens))[:MAX_ROWS]:
            text.append(f"\n  {visible(describe(attachment))}  {about}{count:,} tokens")
        if len(pending) > MAX_ROWS:
            text.append(f"\n  … and {len(pending) - MAX_ROWS} more")
        self.update(text)
