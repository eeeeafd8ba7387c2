"""The main screen: conversation list, messages, attachment bar, input, legend and status line, and the keys
that drive them.

The work runs in components that report back with messages (``ModelLoader`` posts ``Loaded``, ``Answerer``
posts ``Finished``), so the window stays responsive and a backend failure becomes a message, never a crash.
Conversation management, settings changes and attachments have modules of their own
(``assistant.ui.conversations``, ``assistant.ui.setting_changes``, ``assistant.ui.attaching``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from assistant import modelsets
from assistant.chat import backend
from assistant.chat.settings import save as save_settings
from assistant.chat.store import Conversation, Store
from assistant.ui import attaching, conversations
from assistant.ui.widgets.answerer import Answerer
from assistant.ui.widgets.attachment_bar import AttachmentBar
from assistant.ui.widgets.command_runner import CommandRunner
from assistant.ui.widgets.conversation_list import ConversationList
from assistant.ui.widgets.levels import legend
from assistant.ui.widgets.messages import AnswerView, MessageView
from assistant.ui.widgets.model_loader import ModelLoader
from assistant.ui.widgets.prompt_input import PromptInput
from assistant.ui.widgets.status_line import StatusLine, describe_stats, short_path

STOP_NOTES = {"cancelled": "stopped", "max_tokens": "stopped at the max tokens limit", "length": "stopped at the max tokens limit",
              "context": "stopped: the context is full"}


def banner_text(model_set_name: str | None) -> str:
    text = ("Ask for code. Enter sends, Shift+Enter or Ctrl+J adds a line, Esc stops an answer, "
            "Ctrl+P opens the commands, F1 shows help. @path attaches a file; F1 lists /add, /run, /drop, /save.")
    if model_set_name == "demo":
        from assistant.demo import NOTICE

        text += "\n\n" + NOTICE
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
        self.conversation: Conversation | None = None
        self.model_set: modelsets.ModelSet | None = None
        self.loader = ModelLoader()
        self.answerer = Answerer(self.loader)
        self.runner = CommandRunner()

    @property
    def store(self) -> Store:
        return self.app.store

    @property
    def settings(self):
        return self.app.settings

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            yield ConversationList(id="sidebar")
            with Vertical(id="chat"):
                with VerticalScroll(id="messages"):
                    yield Static(id="banner", markup=False)  # names the model set: not ours
                yield Static(id="legend")
                yield AttachmentBar(id="attachment-bar")
                yield PromptInput(cwd=str(self.cwd), id="prompt")
                yield StatusLine(id="status")
        yield Footer()
        yield self.loader
        yield self.answerer
        yield self.runner

    async def on_mount(self) -> None:
        self.query_one("#legend").display = self.settings.speculation_view
        self.query_one("#messages").anchor()
        self.query_one(PromptInput).focus()
        self.query_one(StatusLine).directory = short_path(self.cwd)
        conversation_id = self.resume
        if conversation_id is None and self.app.resume_latest:
            latest = self.store.latest_conversation()
            conversation_id = latest.id if latest else None
        if conversation_id is not None:
            await conversations.open_conversation(self, conversation_id)
        self.refresh_conversations()
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
        self.query_one("#banner", Static).update(banner_text(self.model_set.name))
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
        attaching.update_bar(self)  # counted with the tokenizer from now on

    # conversations

    def refresh_conversations(self, search: str | None = None) -> None:
        conversation_list = self.query_one(ConversationList)
        if search is None:
            search = conversation_list.query_one(Input).value
        current = self.conversation.id if self.conversation else None
        conversation_list.show(self.store.conversations(search), current)

    async def action_new_chat(self) -> None:
        if self.busy():
            return
        self.conversation = None
        await self.query_one("#messages").query(".message").remove()
        attaching.update_bar(self)
        self.refresh_conversations()
        self.query_one(PromptInput).focus()

    def action_toggle_conversations(self) -> None:
        sidebar = self.query_one(ConversationList)
        sidebar.display = not sidebar.display

    def action_search_conversations(self) -> None:
        sidebar = self.query_one(ConversationList)
        sidebar.display = True
        sidebar.query_one(Input).focus()

    @on(ConversationList.SearchChanged)
    def _search(self, event: ConversationList.SearchChanged) -> None:
        self.refresh_conversations(event.query)

    @on(ConversationList.Chosen)
    async def _chosen(self, event: ConversationList.Chosen) -> None:
        if self.busy():
            return
        await conversations.open_conversation(self, event.conversation_id)
        self.refresh_conversations()
        self.query_one(PromptInput).focus()

    @on(ConversationList.RenameRequested)
    def _rename_requested(self, event: ConversationList.RenameRequested) -> None:
        if type(event) is ConversationList.RenameRequested:  # not its subclass DeleteRequested
            conversations.rename(self, event.conversation_id)

    @on(ConversationList.DeleteRequested)
    def _delete_requested(self, event: ConversationList.DeleteRequested) -> None:
        conversations.delete(self, event.conversation_id)

    # sending and generating

    @on(PromptInput.Submitted)
    async def _submitted(self, event: PromptInput.Submitted) -> None:
        await self.send(event.text)

    async def send(self, text: str) -> None:
        if await attaching.command(self, text):
            return
        if self.answerer.generating or self.runner.running:
            attaching.restore(self, text)
            self.notify("Still answering: Esc stops it." if self.answerer.generating else
                        "A command is running: send once it ends, so that its output goes with your message "
                        "(Esc stops it).")
            return
        attachments = await attaching.for_message(self, text)
        if attachments is None:
            attaching.restore(self, text)
            return
        if self.conversation is None:
            self.conversation = self.store.new_conversation(
                system_prompt=self.settings.system_prompt,
                model_set=self.model_set.name if self.model_set else None)
        message = self.store.add_message(self.conversation.id, "user", text, attachments=attachments,
                                         directory=str(self.cwd))  # committed before generating
        attaching.sent(self)
        await self.query_one("#messages").mount(MessageView("user", text, message.id, attaching.line(attachments)))
        self.refresh_conversations()
        await self.start_answer()

    async def start_answer(self) -> None:
        conversation = self.store.conversation(self.conversation.id)
        history = self.store.messages(conversation.id)
        answer = self.store.add_message(conversation.id, "assistant", "", complete=False)
        view = AnswerView(answer.id, speculation_view=self.settings.speculation_view)
        messages = self.query_one("#messages", VerticalScroll)
        await messages.mount(view)
        messages.anchor()
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
            status.context = f"ctx {message.context[0]}/{message.context[1]}"
        if stats:
            status.speed = describe_stats(stats)
            if pipeline is not None:
                self.query_one("#legend", Static).update(legend(list(pipeline.roles), stats))
        await view.finish(STOP_NOTES.get((stats or {}).get("stop_reason"), ""))
        if message.error:
            if not view.text:
                self.store.delete_message(view.message_id)
                await view.remove()
            await self.show_error(message.error)
        if self.conversation:
            self.store.touch(self.conversation.id, self.model_set.name if self.model_set else None)
            self.refresh_conversations()

    async def show_error(self, error: str) -> None:
        """An error is part of the conversation (saved, never sent to the model) or, with none open, a toast."""
        if self.conversation is None:
            self.notify(error, title="Error", severity="error", timeout=10)
            return
        message = self.store.add_message(self.conversation.id, "error", error)
        await self.query_one("#messages").mount(MessageView("error", error, message.id))
        self.query_one("#messages").anchor()

    @on(CommandRunner.Ran)
    def _ran(self, message: CommandRunner.Ran) -> None:
        attaching.ran(self, message)

    def action_stop(self) -> None:
        if self.runner.stop():
            self.notify("Stopping the command…", timeout=2)
        if self.answerer.stop():
            self.query_one(StatusLine).state = "stopping…"

    async def action_regenerate(self) -> None:
        if self.busy() or self.conversation is None:
            return
        messages = self.store.messages(self.conversation.id)
        users = [i for i, m in enumerate(messages) if m.role == "user"]
        if not users:
            return
        for message in messages[users[-1] + 1:]:
            self.store.delete_message(message.id)
            for view in self.query(".message"):
                if getattr(view, "message_id", None) == message.id:
                    await view.remove()
        await self.start_answer()

    def busy(self) -> bool:
        """Whether an answer is being generated, telling the user so: most changes wait until it ends."""
        if self.answerer.generating:
            self.notify("Still answering: press Esc to stop it first.")
        return self.answerer.generating

    # the view

    def action_toggle_speculation_view(self) -> None:
        self.settings.speculation_view = not self.settings.speculation_view
        save_settings(self.settings)
        self.query_one("#legend").display = self.settings.speculation_view
        for view in self.query(AnswerView):
            view.set_speculation_view(self.settings.speculation_view)

    def on_unmount(self) -> None:
        """Runs after the components' own unmount; an answer still running closes the pipeline itself."""
        if not self.answerer.generating and self.loader.pipeline is not None:
            self.loader.pipeline.close()
