"""The sidebar of saved conversations: a search box over a list, most recent first.

It only reports what the user picked; the screen owns the store and decides what happens. A title is the
user's own text (their first message, or what they renamed it to): shown literally, never as markup."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from assistant.conversation.store import Conversation
from assistant.ui.literal import literal


class ConversationList(Vertical):
    class AboutOne(Message):
        """What the user asked for one conversation, by id."""

        def __init__(self, conversation_id: int):
            super().__init__()
            self.conversation_id = conversation_id

    class Chosen(AboutOne):
        pass

    class RenameRequested(AboutOne):
        pass

    class DeleteRequested(AboutOne):
        pass

    class SearchChanged(Message):
        def __init__(self, query: str):
            super().__init__()
            self.query = query

    BINDINGS = [
        Binding("f2", "rename", "Rename", id="conversation.rename"),
        Binding("delete", "delete", "Delete", id="conversation.delete"),
    ]

    def compose(self) -> ComposeResult:
        yield Label("Conversations", classes="title")
        yield Input(placeholder="Search…", id="conversation-search")
        yield OptionList(id="conversation-options")

    def show(self, conversations: list[Conversation], current: int | None) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options(Option(literal(c.title), id=str(c.id)) for c in conversations)
        if current is not None and any(c.id == current for c in conversations):
            options.highlighted = options.get_option_index(str(current))

    @property
    def highlighted_id(self) -> int | None:
        options = self.query_one(OptionList)
        if options.highlighted is None:
            return None
        return int(options.get_option_at_index(options.highlighted).id)

    @on(Input.Changed, "#conversation-search")
    def _search(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.SearchChanged(event.value))

    @on(Input.Submitted, "#conversation-search")
    def _to_list(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_one(OptionList).focus()

    @on(OptionList.OptionSelected, "#conversation-options")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.post_message(self.Chosen(int(event.option.id)))

    def action_rename(self) -> None:
        if self.highlighted_id is not None:
            self.post_message(self.RenameRequested(self.highlighted_id))

    def action_delete(self) -> None:
        if self.highlighted_id is not None:
            self.post_message(self.DeleteRequested(self.highlighted_id))
