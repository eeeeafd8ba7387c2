"""The scrolling column of the conversation on screen: the banner, then one view per message.

It finds views by their message id, so a change in the store (an answer regenerated, attachments dropped)
reaches the views that show it, and it keeps the newest message in sight as answers stream."""

from __future__ import annotations

from textual.containers import VerticalScroll

from assistant.conversation.store import Message
from assistant.ui.widgets.messages import AnswerView, MessageView


def message_view(message: Message, speculation_view: bool, attachments: str = "") -> AnswerView | MessageView:
    """The view of a saved message; an answer that did not complete is marked as stopped."""
    if message.role == "assistant":
        note = "" if message.complete else "stopped"
        return AnswerView(message.id, message.provenance or [(0, message.content)], speculation_view, note)
    return MessageView(message.role, message.content, message.id, attachments)


class MessageColumn(VerticalScroll):
    async def show_all(self, views: list[AnswerView | MessageView]) -> None:
        """Show ``views`` in place of the messages on screen."""
        await self.clear()
        await self.mount_all(views)
        self.anchor()

    async def clear(self) -> None:
        await self.query(".message").remove()

    async def add(self, view: AnswerView | MessageView) -> None:
        await self.mount(view)
        self.anchor()

    async def remove_message(self, message_id: int) -> None:
        for view in self.query(".message"):
            if getattr(view, "message_id", None) == message_id:
                await view.remove()

    def set_attachment_lines(self, lines: dict[int, str]) -> None:
        """Update the line naming the attachments under each user message in ``lines`` (by message id)."""
        for view in self.query(MessageView):
            if view.message_id in lines:
                view.set_attachments(lines[view.message_id])

    def set_speculation_view(self, on: bool) -> None:
        for view in self.query(AnswerView):
            view.set_speculation_view(on)

    @property
    def last_answer(self) -> str:
        """The text of the last answer ("" before the first), for copying and saving its code."""
        answers = list(self.query(AnswerView))
        return answers[-1].text if answers else ""
