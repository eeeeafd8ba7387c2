"""The command palette's chat entries: every action, plus the settings that have no key of their own.

Built fresh each time the palette opens, so entries follow the state (model sets, code blocks, toggles).
Copying to the clipboard is only offered here, so its few lines live here too."""

from __future__ import annotations

from functools import partial
from typing import Callable

from textual.app import App
from textual.command import DiscoveryHit, Hit, Hits, Matcher, Provider
from textual.content import Content

from assistant import modelsets
from assistant.conversation.codeblocks import code_blocks
from assistant.ui.literal import literal, visible


def copy(app: App, text: str, what: str) -> None:
    if not text:
        app.notify(f"No {what} to copy.")
        return
    app.copy_to_clipboard(text)
    app.notify(f"Copied the {what}.")


def palette_entries(screen) -> list[tuple[str, str, Callable]]:
    """(title, help, callback) for each command available on the chat screen."""
    settings, editor, conversations = screen.settings, screen.settings_editor, screen.conversations
    commands = [
        ("New chat", "Start a new conversation (Ctrl+N)", screen.action_new_chat),
        ("Regenerate", "Answer the last message again (Ctrl+R)", screen.action_regenerate),
        ("Stop", "Stop the answer being generated, keeping what it said (Esc)", screen.action_stop),
        ("Copy last answer", "Copy the last answer to the clipboard",
         lambda: copy(screen.app, screen.column.last_answer, "last answer")),  # as it is when chosen
    ]
    for number, block in enumerate(code_blocks(screen.column.last_answer), 1):
        commands.append((f"Copy code block {number} ({block.label})", "Copy this block of the last answer",
                         partial(copy, screen.app, block.code, f"code block {number}")))
    commands += [
        ("Search conversations", "Find a conversation by title or text", screen.action_search_conversations),
        ("Rename conversation", "Give this conversation a new title", conversations.rename),
        ("Delete conversation", "Delete this conversation and its messages", conversations.delete),
        ("Export conversation to Markdown", "Write this conversation to a .md file", conversations.export),
        ("Show or hide the conversation list", "Toggle the sidebar (Ctrl+B)", screen.action_toggle_conversations),
        ("Toggle speculation view", "Colour each token by the model level that proposed it (F3)",
         screen.action_toggle_speculation_view),
        ("Set system prompt", f"Now: {settings.system_prompt[:40] or '(none)'}",
         partial(editor.ask, "System prompt", settings.system_prompt, editor.set_system_prompt)),
        ("Set temperature", f"Now {settings.temperature:g} (0 = greedy)",
         partial(editor.ask, "Temperature (0 = greedy)", f"{settings.temperature:g}", editor.set_temperature)),
        ("Set max tokens", f"Now {settings.max_tokens}",
         partial(editor.ask, "Max tokens per answer", str(settings.max_tokens), editor.set_max_tokens)),
        ("Set command timeout", f"Now {settings.command_timeout:g} s: a ! or /run command is stopped after it",
         partial(editor.ask, "Command timeout in seconds", f"{settings.command_timeout:g}",
                 editor.set_command_timeout)),
        ("Speculation off" if settings.speculation else "Speculation on",
         "Generate with the target alone" if settings.speculation else "Draft with the cheaper levels again",
         partial(editor.set_speculation, not settings.speculation)),
    ]
    if screen.model_set is not None:
        for count in range(2, len(screen.model_set.levels) + 1):
            roles = " ← ".join(level.role for level in screen.model_set.levels[:count])
            commands.append((f"Use {count} levels", roles, partial(editor.set_speculation, True, count)))
    try:
        sets = modelsets.list_sets()[0]
    except modelsets.ModelSetError:
        sets = []
    for model_set in sets:
        current = " (in use)" if screen.model_set and screen.model_set.name == model_set.name else ""
        commands.append((f"Switch model set: {model_set.name}{current}",
                         " ← ".join(level.role for level in model_set.levels),
                         partial(editor.switch_model_set, model_set.name)))
    commands.append(("Help", "Keys, binding ids and how to remap them (F1)", screen.app.action_help))
    return commands


def highlighted(matcher: Matcher, title: str) -> Content:
    """``title`` shown literally with the letters the query matched highlighted (``Matcher.highlight`` would
    read it as markup: a model's code block or a model set's name is not ours)."""
    shown = visible(title)
    content = literal(title)
    _, offsets = matcher.fuzzy_search.match(matcher.query, shown)
    for offset in offsets:
        if not shown[offset].isspace():
            content = content.stylize(matcher.match_style, offset, offset + 1)
    return content


class ChatPalette(Provider):
    """The chat screen's entries. Titles and help are Content, shown as they are (the palette reads a string
    as markup)."""

    def _commands(self):
        from assistant.ui.screens.chat import ChatScreen

        return palette_entries(self.screen) if isinstance(self.screen, ChatScreen) else []

    async def discover(self) -> Hits:
        for title, help_text, callback in self._commands():
            yield DiscoveryHit(literal(title), callback, text=title, help=literal(help_text))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, highlighted(matcher, title), callback, text=title, help=literal(help_text))
