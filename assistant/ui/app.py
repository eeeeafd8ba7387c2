"""``ChatApp``: holds the settings and the store, applies the user's keymap, and shows the chat screen."""

from __future__ import annotations

from textual.app import App
from textual.binding import Binding

from assistant import home
from assistant.conversation import settings as chat_settings
from assistant.conversation.store import Store
from assistant.ui.literal import visible
from assistant.ui.palette import ChatPalette
from assistant.ui.screens.chat import ChatScreen
from assistant.ui.screens.help import HelpScreen


class ChatApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "assistant"
    COMMANDS = App.COMMANDS | {ChatPalette}
    BINDINGS = [
        Binding("f1", "help", "Help", id="app.help"),
        Binding("ctrl+q", "quit", "Quit", id="app.quit", priority=True),
    ]

    def __init__(self, settings: chat_settings.ChatSettings | None = None, store: Store | None = None,
                 resume: int | None = None, resume_latest: bool = True, cwd: str | None = None,
                 target_rpc: str | None = None):
        super().__init__()
        self.settings = settings or chat_settings.load()
        self.store = store or Store()
        self.resume = resume
        self.resume_latest = resume_latest
        self.cwd = cwd  # where attached paths and commands are relative to; None: the current directory
        self.target_rpc = target_rpc  # HOST:PORT: every model set's target runs there (else as each set says)

    def on_mount(self) -> None:
        self.set_keymap(self.settings.keymap)
        self.push_screen(ChatScreen(self.resume, self.cwd))

    def notify(self, message: str, *, title: str = "", severity="information", timeout: float | None = None,
               markup: bool = False) -> None:
        """Every notification is shown literally, whatever ``markup`` says (widgets pass True by default): they
        name paths, commands, file and model text, and none of ours is written in markup."""
        super().notify(visible(message), title=visible(title), severity=severity, timeout=timeout, markup=False)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        bindings = [active.binding for active in self.screen.active_bindings.values() if active.binding.id]
        self.push_screen(HelpScreen(bindings, str(home.config_path())))
