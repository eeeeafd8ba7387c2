"""Conversation management for the chat screen: open a saved one, rename, delete, export to Markdown.

Kept out of the screen, which keeps the keys and the life of an answer; each function acts on the screen it
is given (its store, message column, dialogs and notifications)."""

from __future__ import annotations

from textual.containers import VerticalScroll

from assistant.chat import export as markdown
from assistant.chat.store import Message
from assistant.ui import attaching
from assistant.ui.screens.ask import AskScreen, ConfirmScreen
from assistant.ui.widgets.messages import AnswerView, MessageView


def message_view(message: Message, speculation_view: bool, attachments: str = "") -> AnswerView | MessageView:
    if message.role == "assistant":
        note = "" if message.complete else "stopped"
        return AnswerView(message.id, message.provenance or [(0, message.content)], speculation_view, note)
    return MessageView(message.role, message.content, message.id, attachments)


async def open_conversation(screen, conversation_id: int) -> None:
    """Show a saved conversation in place of the one on screen."""
    screen.conversation = screen.store.conversation(conversation_id)
    messages = screen.query_one("#messages", VerticalScroll)
    await messages.query(".message").remove()
    lines = attaching.lines_by_message(screen, conversation_id)
    views = [message_view(message, screen.settings.speculation_view, lines.get(message.id, ""))
             for message in screen.store.messages(conversation_id)]
    await messages.mount_all(views)
    messages.anchor()
    attaching.update_bar(screen)


def chosen_or_open(screen, conversation_id: int | None) -> int | None:
    """The conversation picked in the list, else the open one (None before the first message)."""
    return conversation_id or (screen.conversation.id if screen.conversation else None)


def rename(screen, conversation_id: int | None = None) -> None:
    conversation_id = chosen_or_open(screen, conversation_id)
    if conversation_id is None:
        screen.notify("Nothing to rename yet: send a message first.")
        return

    def renamed(title: str | None) -> None:
        if title is not None:
            screen.store.rename(conversation_id, title)
            if screen.conversation and screen.conversation.id == conversation_id:
                screen.conversation = screen.store.conversation(conversation_id)
            screen.refresh_conversations()

    title = screen.store.conversation(conversation_id).title
    screen.app.push_screen(AskScreen("Rename conversation", title), renamed)


def delete(screen, conversation_id: int | None = None) -> None:
    conversation_id = chosen_or_open(screen, conversation_id)
    if conversation_id is None or screen.busy():
        return

    async def confirmed(yes: bool | None) -> None:
        if yes:
            screen.store.delete(conversation_id)
            if screen.conversation and screen.conversation.id == conversation_id:
                await screen.action_new_chat()
            screen.refresh_conversations()

    title = screen.store.conversation(conversation_id).title
    screen.app.push_screen(ConfirmScreen(f"Delete “{title}” and all its messages?"), confirmed)


def export(screen) -> None:
    if screen.conversation is None:
        screen.notify("Nothing to export yet.")
        return
    conversation = screen.store.conversation(screen.conversation.id)
    path = markdown.export(conversation, screen.store.messages(conversation.id))
    screen.notify(f"Exported to {path}")
