"""The chat's settings changed from the palette or `/timeout`: ask for a value, check it, save it; switch
model sets and levels.

A value that does not parse is refused with the reason, never stored. Changing what is loaded goes through
``reload``, the screen's own loading, since the status line and banner follow the model set."""

from __future__ import annotations

from typing import Callable


from assistant.conversation.settings import ChatSettings, save
from assistant.ui.components.answerer import Answerer
from assistant.ui.components.component import Component
from assistant.ui.components.conversations import Conversations
from assistant.ui.screens.ask import AskScreen


def parse_temperature(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 5:
        raise ValueError("the temperature must be between 0 (greedy) and 5")
    return value


def parse_max_tokens(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("max tokens must be at least 1")
    return value


def parse_command_timeout(text: str) -> float:
    try:
        value = float(text.removesuffix("s").strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 24 * 3600:
        raise ValueError("the command timeout is a number of seconds, more than 0 and at most a day (86400)")
    return value


class SettingsEditor(Component):
    """Never shown."""

    def __init__(self, conversations: Conversations, answerer: Answerer, reload: Callable[[], None]):
        super().__init__()
        self.conversations = conversations
        self.answerer = answerer
        self.reload = reload

    @property
    def settings(self) -> ChatSettings:
        return self.app.settings

    def ask(self, question: str, value: str, apply: Callable[[str], None]) -> None:
        """Ask for one value; ``apply(text)`` parses and stores it, raising ValueError to reject it."""
        def answered(text: str | None) -> None:
            if text is None:
                return
            try:
                apply(text.strip())
            except ValueError as error:
                self.notify(f"Not changed: {error}", severity="error")
                return
            save(self.settings)

        self.app.push_screen(AskScreen(question, value), answered)

    def set_system_prompt(self, text: str) -> None:
        """For new conversations, and for the open one from its next answer on."""
        self.settings.system_prompt = text
        self.conversations.set_system_prompt(text)

    def set_temperature(self, text: str) -> None:
        self.settings.temperature = parse_temperature(text)

    def set_max_tokens(self, text: str) -> None:
        self.settings.max_tokens = parse_max_tokens(text)

    def set_command_timeout(self, text: str) -> None:
        self.settings.command_timeout = parse_command_timeout(text)

    def timeout(self, argument: str) -> bool:
        """`/timeout SECONDS`: how long a command may run before it is stopped, saved with the settings;
        `/timeout` alone says what it is."""
        if not argument:
            self.notify(f"Commands are stopped after {self.settings.command_timeout:g} s; /timeout SECONDS "
                        "changes it.", timeout=5)
            return True
        try:
            self.set_command_timeout(argument)
        except ValueError as error:
            self.notify(f"/timeout: {error}", severity="error")
            return False
        save(self.settings)
        self.notify(f"Commands are now stopped after {self.settings.command_timeout:g} s.", timeout=4)
        return True

    def reload_with(self, **changes) -> None:
        """Change the settings that decide what is loaded, save them and load again (not while answering)."""
        if self.answerer.busy():
            return
        for name, value in changes.items():
            setattr(self.settings, name, value)
        save(self.settings)
        self.reload()

    def switch_model_set(self, name: str) -> None:
        self.reload_with(model_set=name)

    def set_speculation(self, on: bool, levels: int | None = None) -> None:
        self.reload_with(speculation=on, **({} if levels is None else {"levels": levels}))

    def toggle_speculation_view(self) -> bool:
        """Show or hide which level proposed each token; saved at once. The new state."""
        self.settings.speculation_view = not self.settings.speculation_view
        save(self.settings)
        return self.settings.speculation_view
