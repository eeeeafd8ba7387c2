"""The main screen: conversation list, messages, attachment bar, input, legend and status line, the keys
that drive them, and the life of an answer from the message sent to the last piece shown.

What the chat keeps between messages lives in components the screen composes and hands its widgets to
(``Conversations``, ``Attachments``, ``SettingsEditor``, ``CodeSaver`` in ``assistant.ui.components``).
The slow work runs in widgets that report back with messages (``ModelLoader`` posts ``Loaded``, ``Answerer``
posts ``Finished``), so the window stays responsive and a backend failure becomes a message, never a crash."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from assistant import modelsets
from assistant.conversation import backend
from assistant.conversation.store import Store
from assistant.ui import typed_commands
from assistant.ui.components.answerer import Answerer
from assistant.ui.components.attachments import Attachments, line
from assistant.ui.components.code_saver import CodeSaver
from assistant.ui.components.conversations import Conversations
from assistant.ui.components.model_loader import ModelLoader
from assistant.ui.components.settings_editor import SettingsEditor
from assistant.ui.widgets.attachment_bar import AttachmentBar
from assistant.ui.widgets.conversation_list import ConversationList
from assistant.ui.widgets.level_colours import legend
from assistant.ui.widgets.message_column import MessageColumn
from assistant.ui.widgets.messages import AnswerView, MessageView
from assistant.ui.widgets.prompt_input import PromptInput
from assistant.ui.widgets.status_line import StatusLine, describe_context, describe_stats, short_path

STOP_NOTES = {"cancelled": "stopped", "max_tokens": "stopped at the max tokens limit", "length": "stopped at the max tokens limit",
              "context": "stopped: the context is full"}


def banner_text(model_set: modelsets.ModelSet | None) -> str:
    """The keys, and what the models are where the set says (the demo set: a small model, of Q4_1 quality)."""
    text = ("Ask for code. Enter sends, Shift+Enter or Ctrl+J adds a line, Esc stops an answer, "
            "Ctrl+P opens the commands, F1 shows help. @path attaches a file; F1 lists /add, /run, /drop, /save.")
    if model_set is not None and model_set.description:
        text += f"\n\nModel set {model_set.name!r}: {model_set.description}"
    return text


class ChatScreen(Screen):
    BINDINGS = [
        Binding("ctrl+n", "new_chat", "New chat", id="chat.new"),
        Binding("ctrl+r", "regenerate", "Regenerate", id="chat.regenerate"),
        Binding("escape", "stop", "Stop", id="chat.stop"),
        Binding("ctrl+b", "toggle_conversations", "Chats", id="chat.conversations"),
        Binding("f3", "toggle_speculation_view", "Speculation view", id="chat.speculation_view"),
    ]

    def __init__(self, resume: int | None = None, cwd: str | Path | None = None):
        super().__init__()
        self.resume = resume
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()  # what attached paths and commands are relative to
        self.model_set: modelsets.ModelSet | None = None
        self.sidebar = ConversationList(id="sidebar")
        self.column = MessageColumn(id="messages")
        self.bar = AttachmentBar(id="attachment-bar")
        self.loader = ModelLoader()
        self.answerer = Answerer(self.loader)
        self.conversations = Conversations(self.sidebar, self.column, self.answerer)
        self.attachments = Attachments(self.bar, self.conversations, self.column, self.loader, self.cwd)
        self.settings_editor = SettingsEditor(self.conversations, self.answerer, reload=self.load_models)
        self.code_saver = CodeSaver(self.column, self.answerer, self.cwd)

    @property
    def store(self) -> Store:
        return self.app.store

    @property
    def settings(self):
        return self.app.settings

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            yield self.sidebar
            with Vertical(id="chat"):
                with self.column:
                    yield Static(id="banner", markup=False)  # names the model set: not ours
                yield Static(id="legend")
                yield self.bar
                yield PromptInput(cwd=str(self.cwd), id="prompt")
                yield StatusLine(id="status")
        yield Footer()
        yield self.loader
        yield self.answerer
        yield self.conversations
        yield self.attachments
        yield self.settings_editor
        yield self.code_saver

    async def on_mount(self) -> None:
        self.query_one("#legend").display = self.settings.speculation_view
        self.column.anchor()
        self.query_one(PromptInput).focus()
        self.query_one(StatusLine).directory = short_path(self.cwd)
        conversation_id = self.resume
        if conversation_id is None and self.app.resume_latest:
            latest = self.store.latest_conversation()
            conversation_id = latest.id if latest else None
        if conversation_id is not None:
            await self.conversations.open(conversation_id)
        self.conversations.refresh_list()
        self.load_models()

    # the model set

    def load_models(self) -> None:
        """Load the chosen model set in a thread; the window stays usable and typing can start at once."""
        status = self.query_one(StatusLine)
        try:
            self.model_set = modelsets.get(self.settings.model_set)
        except modelsets.ModelSetError as error:
            self.model_set = None
            self.loader.fail(str(error))
            return
        if self.app.target_rpc:
            self.model_set = dataclasses.replace(self.model_set, target_rpc=self.app.target_rpc)
        count = self.settings.level_count(len(self.model_set.levels))
        roles = [level.role for level in self.model_set.levels[:count]]
        if self.model_set.target_rpc:
            roles[0] += f"@{self.model_set.target_rpc}"
        status.model = f"{self.model_set.name} · " + (" ← ".join(roles) if count > 1 else roles[0] + " only")
        status.state = f"loading {count} level{'s' if count > 1 else ''}…"
        status.speed = status.context = ""
        status.loading = True
        self.query_one("#banner", Static).update(banner_text(self.model_set))
        self.loader.load(self.model_set, dataclasses.replace(self.settings))

    @on(ModelLoader.Loaded)
    async def _loaded(self, message: ModelLoader.Loaded) -> None:
        status = self.query_one(StatusLine)
        status.loading = False
        if message.error:
            status.state = "no model"
            await self.show_error(message.error)
            return
        pipeline = message.pipeline
        self.query_one("#legend", Static).update(legend(list(pipeline.roles)))
        status.state = "ready"
        status.context = f"ctx {pipeline.context_used}/{pipeline.n_ctx}"
        self.attachments.recount()  # counted with the tokenizer from now on

    # conversations

    async def action_new_chat(self) -> None:
        if not self.answerer.busy():
            await self.conversations.close()

    @on(Conversations.Switched)
    def _switched(self) -> None:
        self.attachments.recount()  # the context left depends on the conversation
        self.query_one(PromptInput).focus()

    def action_toggle_conversations(self) -> None:
        self.sidebar.display = not self.sidebar.display

    def action_search_conversations(self) -> None:
        self.sidebar.display = True
        self.sidebar.query_one(Input).focus()

    @on(ConversationList.SearchChanged)
    def _search(self, event: ConversationList.SearchChanged) -> None:
        self.conversations.refresh_list(event.query)

    @on(ConversationList.Chosen)
    async def _chosen(self, event: ConversationList.Chosen) -> None:
        if self.answerer.busy():
            return
        await self.conversations.open(event.conversation_id)
        self.conversations.refresh_list()

    @on(ConversationList.RenameRequested)
    def _rename_requested(self, event: ConversationList.RenameRequested) -> None:
        self.conversations.rename(event.conversation_id)

    @on(ConversationList.DeleteRequested)
    def _delete_requested(self, event: ConversationList.DeleteRequested) -> None:
        self.conversations.delete(event.conversation_id)

    # sending and generating

    @on(PromptInput.Submitted)
    async def _submitted(self, event: PromptInput.Submitted) -> None:
        await self.send(event.text)

    async def send(self, text: str) -> None:
        if await self.carry_out(text):
            return
        if self.answerer.generating or self.attachments.runner.running:
            self.restore_input(text)
            self.notify("Still answering: Esc stops it." if self.answerer.generating else
                        "A command is running: send once it ends, so that its output goes with your message "
                        "(Esc stops it).")
            return
        attachments = await self.attachments.for_message(text)
        if attachments is None:
            self.restore_input(text)
            return
        conversation = self.conversations.current or self.conversations.start(
            self.settings.system_prompt, self.model_set.name if self.model_set else None)
        message = self.store.add_message(conversation.id, "user", text, attachments=attachments,
                                         directory=str(self.cwd))  # committed before generating
        self.attachments.sent()
        await self.column.add(MessageView("user", text, message.id, line(attachments)))
        self.conversations.refresh_list()
        await self.start_answer()

    async def carry_out(self, text: str) -> bool:
        """Carry out ``text`` when it is a typed command (True), putting it back into the input when refused;
        False leaves it to be sent as a message."""
        command = typed_commands.parse(text)
        if command is None:
            return False
        name, argument = command
        handlers = {"add": self.attachments.add, "run": self.attachments.run, "drop": self.attachments.drop,
                    "save": self.code_saver.save, "timeout": self.settings_editor.timeout}
        if name in handlers:
            done = handlers[name](argument)
            if inspect.isawaitable(done):
                done = await done
        else:
            self.notify(f"/{name}: no such command (there are {typed_commands.USAGE})", severity="warning")
            done = False
        if not done:
            self.restore_input(text)
        return True

    def restore_input(self, text: str) -> None:
        """Put ``text`` back into the input, to fix and send again."""
        prompt = self.query_one(PromptInput)
        prompt.text = text
        prompt.move_cursor(prompt.document.end)

    async def start_answer(self) -> None:
        conversation = self.store.conversation(self.conversations.current_id)
        history = self.store.messages(conversation.id)
        answer = self.store.add_message(conversation.id, "assistant", "", complete=False)
        view = AnswerView(answer.id, speculation_view=self.settings.speculation_view)
        await self.column.add(view)
        self.query_one(StatusLine).state = "answering…" if self.loader.ready.is_set() else "waiting for the model…"
        prompt = backend.chat_prompt(conversation.system_prompt, history, self.store.attachments(conversation.id),
                                     self.cwd)
        self.answerer.start(view, prompt, dataclasses.replace(self.settings))

    @on(Answerer.Finished)
    async def _finished(self, message: Answerer.Finished) -> None:
        view, stats = message.view, message.stats
        status = self.query_one(StatusLine)
        pipeline = self.loader.pipeline
        status.state = "ready" if pipeline is not None else "no model"
        if message.context:
            status.context = describe_context(*message.context, stats)
        if stats:
            status.speed = describe_stats(stats)
            if pipeline is not None:
                self.query_one("#legend", Static).update(legend(list(pipeline.roles), stats))
        view.set_note(STOP_NOTES.get((stats or {}).get("stop_reason"), ""))
        if message.error:
            if not view.text:
                self.store.delete_message(view.message_id)
                await view.remove()
            await self.show_error(message.error)
        self.conversations.answered(self.model_set.name if self.model_set else None)

    async def show_error(self, error: str) -> None:
        """An error is part of the conversation (saved, never sent to the model) or, with none open, a toast."""
        if self.conversations.current is None:
            self.notify(error, title="Error", severity="error", timeout=10)
            return
        message = self.store.add_message(self.conversations.current_id, "error", error)
        await self.column.add(MessageView("error", error, message.id))

    def action_stop(self) -> None:
        if self.attachments.runner.stop():
            self.notify("Stopping the command…", timeout=2)
        if self.answerer.stop():
            self.query_one(StatusLine).state = "stopping…"

    async def action_regenerate(self) -> None:
        if self.answerer.busy() or self.conversations.current is None:
            return
        messages = self.store.messages(self.conversations.current_id)
        users = [i for i, m in enumerate(messages) if m.role == "user"]
        if not users:
            return
        for message in messages[users[-1] + 1:]:
            self.store.delete_message(message.id)
            await self.column.remove_message(message.id)
        await self.start_answer()

    # the view

    def action_toggle_speculation_view(self) -> None:
        on = self.settings_editor.toggle_speculation_view()
        self.query_one("#legend").display = on
        self.column.set_speculation_view(on)

    def on_unmount(self) -> None:
        """Runs after the components' own unmount; an answer still running closes the pipeline itself."""
        if not self.answerer.generating and self.loader.pipeline is not None:
            self.loader.pipeline.close()
