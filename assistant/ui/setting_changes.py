"""Settings changed from the command palette: ask for a value, check it, save it; switch model sets and levels.

Kept out of the chat screen; a value that does not parse is refused with the reason, never stored."""

from __future__ import annotations

from typing import Callable

from assistant.chat.settings import save
from assistant.ui.screens.ask import AskScreen


def ask(screen, question: str, value: str, apply: Callable[[object, str], None]) -> None:
    """Ask for one value; ``apply(screen, text)`` parses and stores it, raising ValueError to reject it."""
    def answered(text: str | None) -> None:
        if text is None:
            return
        try:
            apply(screen, text.strip())
        except ValueError as error:
            screen.notify(f"Not changed: {error}", severity="error")
            return
        save(screen.settings)

    screen.app.push_screen(AskScreen(question, value), answered)


def set_system_prompt(screen, text: str) -> None:
    screen.settings.system_prompt = text
    if screen.conversation is not None:
        screen.store.set_system_prompt(screen.conversation.id, text)


def set_temperature(screen, text: str) -> None:
    value = float(text)
    if not 0 <= value <= 5:
        raise ValueError("the temperature must be between 0 (greedy) and 5")
    screen.settings.temperature = value


def set_max_tokens(screen, text: str) -> None:
    value = int(text)
    if value < 1:
        raise ValueError("max tokens must be at least 1")
    screen.settings.max_tokens = value


def set_command_timeout(screen, text: str) -> None:
    try:
        value = float(text.removesuffix("s").strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 24 * 3600:
        raise ValueError("the command timeout is a number of seconds, more than 0 and at most a day (86400)")
    screen.settings.command_timeout = value


def reload_with(screen, **changes) -> None:
    """Change the settings that decide what is loaded, save them and load again (not while answering)."""
    if screen.busy():
        return
    for name, value in changes.items():
        setattr(screen.settings, name, value)
    save(screen.settings)
    screen.load_models()


def switch_model_set(screen, name: str) -> None:
    reload_with(screen, model_set=name)


def set_speculation(screen, on: bool, levels: int | None = None) -> None:
    reload_with(screen, speculation=on, **({} if levels is None else {"levels": levels}))
