"""Which conversation is open, and everything done to conversations: open, start, rename, delete, export.

The one place the chat asks the store about conversations as a whole; the sidebar lists them and the message
column shows the open one. Whoever depends on the open conversation (the attachment bar's count) hears of a
change through ``Switched``."""

from __future__ import annotations

from textual.message import Message
from textual.widgets import Input

from assistant.conversation import export as markdown
from assistant.conversation.store import Conversation, Store
from assistant.ui.components.answerer import Answerer
from assistant.ui.components.component import Component
from assistant.ui.screens.ask import AskScreen, ConfirmScreen
from assistant.ui.widgets.attachment_bar import lines_by_message
from assistant.ui.widgets.conversation_list import ConversationList
from assistant.ui.widgets.message_column import MessageColumn, message_view


class Conversations(Component):
    """Holds the open conversation in ``current`` (None before the first message); never shown."""

    class Switched(Message):
        """Another conversation is open, or none."""

    def __init__(self, sidebar: ConversationList, column: MessageColumn, answerer: Answerer):
        super().__init__()
        self.sidebar = sidebar
        self.column = column
        self.answerer = answerer
        self.current: Conversation | None = None

    @property
    def store(self) -> Store:
        return self.app.store

    @property
    def current_id(self) -> int | None:
        return self.current.id if self.current else None

    def refresh_list(self, search: str | None = None) -> None:
        """List the saved conversations matching ``search`` (by default what the search box holds)."""
        if search is None:
            search = self.sidebar.query_one(Input).value
        self.sidebar.show(self.store.conversations(search), self.current_id)

    async def open(self, conversation_id: int) -> None:
        """Show a saved conversation in place of the one on screen."""
        self.current = self.store.conversation(conversation_id)
        lines = lines_by_message(self.store.attachments(conversation_id))
        speculation_view = self.app.settings.speculation_view
        await self.column.show_all([message_view(message, speculation_view, lines.get(message.id, ""))
                                    for message in self.store.messages(conversation_id)])
        self.post_message(self.Switched())

    async def close(self) -> None:
        """Clear the screen for a new conversation, which the first message will start."""
        self.current = None
        await self.column.clear()
        self.post_message(self.Switched())
        self.refresh_list()

    def start(self, system_prompt: str, model_set: str | None) -> Conversation:
        """Save a new conversation (on its first message) and make it the open one."""
        self.current = self.store.new_conversation(system_prompt=system_prompt, model_set=model_set)
        self.post_message(self.Switched())
        return self.current

    def answered(self, model_set: str | None) -> None:
        """The open conversation was answered: it moves to the top of the list."""
        if self.current:
            self.store.touch(self.current.id, model_set)
            self.refresh_list()

    def set_system_prompt(self, text: str) -> None:
        if self.current is not None:
            self.store.set_system_prompt(self.current.id, text)

    def rename(self, conversation_id: int | None = None) -> None:
        """Ask for a new title of the conversation picked in the list, else of the open one."""
        conversation_id = conversation_id or self.current_id
        if conversation_id is None:
            self.notify("Nothing to rename yet: send a message first.")
            return

        def renamed(title: str | None) -> None:
            if title is not None:
                self.store.rename(conversation_id, title)
                if self.current_id == conversation_id:
                    self.current = self.store.conversation(conversation_id)
                self.refresh_list()

        title = self.store.conversation(conversation_id).title
        self.app.push_screen(AskScreen("Rename conversation", title), renamed)

    def delete(self, conversation_id: int | None = None) -> None:
        """Delete the conversation picked in the list, else the open one, once confirmed (not while answering)."""
        conversation_id = conversation_id or self.current_id
        if conversation_id is None or self.answerer.busy():
            return

        async def confirmed(yes: bool | None) -> None:
            if yes:
                self.store.delete(conversation_id)
                if self.current_id == conversation_id:
                    await self.close()
                self.refresh_list()

        title = self.store.conversation(conversation_id).title
        self.app.push_screen(ConfirmScreen(f"Delete “{title}” and all its messages?"), confirmed)

    def export(self) -> None:
        if self.current is None:
            self.notify("Nothing to export yet.")
            return
        conversation = self.store.conversation(self.current.id)
        path = markdown.export(conversation, self.store.messages(conversation.id))
        self.notify(f"Exported to {path}")
