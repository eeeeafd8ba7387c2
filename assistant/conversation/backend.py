"""The chat's only contact with the generation backend: load a model set, stream one saved answer.

Kept this small so the UI can run it in a worker thread and every failure arrives as one AssistantError."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from assistant.attachments import system_messages, with_attachments
from assistant.conversation import attached_files
from assistant.conversation.recorder import AnswerRecorder, stats_dict
from assistant.conversation.settings import ChatSettings
from assistant.conversation.store import Message, Store, StoredAttachment
from assistant.errors import AssistantError
from assistant.modelsets import ModelSet, ModelSetError

Show = Callable[[list[tuple[int, str]]], None]


def load_pipeline(model_set: ModelSet, settings: ChatSettings):
    """Load ``model_set`` cut to the levels the settings ask for; any failure becomes an AssistantError."""
    from assistant.speculative import Pipeline

    try:
        levels = model_set.first(settings.level_count(len(model_set.levels)))
        missing = levels.missing_files()
        if missing:
            raise AssistantError(f"model set {model_set.name!r}: missing file {missing[0]}")
        # speculation off is the target alone; on, even a one-model set gets the n-gram level under it
        return Pipeline.load(levels, n_ctx=settings.n_ctx, ngram=None if settings.speculation else False)
    except (AssistantError, ModelSetError):
        raise
    except Exception as error:  # the backend is native code underneath: never let it take the UI down
        raise AssistantError(f"cannot load model set {model_set.name!r}: {error}") from error


@dataclass(frozen=True)
class ChatPrompt:
    """What the model is asked, before it is fitted to the context: the system prompt, the user and assistant
    turns as the model reads them, and the attachments each turn carries. Kept together so that a turn left
    out to fit the context takes its files out of the system note too, which then names them as left out."""

    system_prompt: str
    turns: list[dict]
    attached: list[list[StoredAttachment]]  # each turn's attachments, as stored
    cwd: Path

    def messages(self, left_out: int = 0) -> list[dict]:
        """The messages without the first ``left_out`` turns, the system note saying what went with them."""
        kept = [stored for group in self.attached[left_out:] for stored in group]
        gone = [stored for group in self.attached[:left_out] for stored in group]
        note = attached_files.note(kept, self.cwd, left_out=gone)
        return system_messages(self.system_prompt, note) + self.turns[left_out:]


def chat_prompt(system_prompt: str, history: list[Message], attached: Sequence[StoredAttachment] = (),
                cwd: str | Path | None = None) -> ChatPrompt:
    """The system prompt (naming the attached files), then user and assistant turns, each user turn with its
    attachments' blocks before its text (errors are for people only). ``cwd`` is the chat's working directory
    (default: the current one), which the files' names are relative to."""
    cwd = Path.cwd() if cwd is None else Path(cwd)
    blocks = attached_files.by_message(attached, cwd)
    turns = [m for m in history if m.role in ("user", "assistant")]
    stored = {}
    for item in attached:
        stored.setdefault(item.message_id, []).append(item)
    return ChatPrompt(system_prompt,
                      [{"role": m.role, "content": with_attachments(m.content, blocks.get(m.id, []))} for m in turns],
                      [stored.get(m.id, []) for m in turns], cwd)


def prompt_messages(system_prompt: str, history: list[Message], attached: Sequence[StoredAttachment] = (),
                    cwd: str | Path | None = None) -> list[dict]:
    """What the model sees of the whole conversation (see ``chat_prompt``), before fitting the context."""
    return chat_prompt(system_prompt, history, attached, cwd).messages()


TURN_OVERHEAD = 8  # tokens a chat template adds around each message, a generous estimate
CUTS_PER_CONTEXT = 4  # a cut leaves out about a quarter of the context more than it must


def fit_context(pipeline, prompt: ChatPrompt, max_tokens: int) -> list[dict]:
    """Leave out the oldest turns (never the system prompt or the last message) until the prompt and the answer
    fit; the system note then names the files and command output that went with them.

    Turns are left out only at ``cut_points``, so the next turns keep the same opening, and the cache of it,
    until they no longer fit either. A single message too long for the context still goes through, so the
    pipeline's own error names it."""
    budget = pipeline.n_ctx - max_tokens

    def size(message: dict) -> int:
        return len(pipeline.tokenize(message["content"])) + TURN_OVERHEAD

    sizes = [size(turn) for turn in prompt.turns]
    for left_out in cut_points(prompt.turns, sizes, max(1, budget // CUTS_PER_CONTEXT)):
        messages = prompt.messages(left_out)
        system = messages[:len(messages) - len(prompt.turns) + left_out]
        if sum(map(size, system)) + sum(sizes[left_out:]) <= budget:
            return messages
    return messages  # the last message alone, too long: the pipeline's error says so


def cut_points(turns: list[dict], sizes: list[int], step: int):
    """How many of the oldest turns may be left out, fewest first: none; then, before a user's turn, each time
    the turns left out pass another ``step`` tokens; then all but the last. Each point depends on the turns
    before it only, so it stays where it is as the conversation grows."""
    yield 0
    total = passed = 0
    for index, size in enumerate(sizes[:-1]):
        total += size
        if turns[index + 1]["role"] == "user" and total // step > passed:
            passed = total // step
            yield index + 1
    if len(turns) > 1:
        yield len(turns) - 1


def generate(
    pipeline,
    store: Store,
    answer_id: int,
    prompt: ChatPrompt,
    settings: ChatSettings,
    cancel: threading.Event,
    show: Show,
) -> dict:
    """Stream an answer into message ``answer_id``; ``show`` gets each piece only after it is committed.

    Returns the run's statistics as a dict (``stop_reason`` "cancelled" when ``cancel`` was set)."""
    from assistant.speculative import Sampling

    recorder = AnswerRecorder(store, answer_id)
    stats = None
    try:
        sampling = Sampling(temperature=settings.temperature)
        messages = fit_context(pipeline, prompt, settings.max_tokens)
        answer = pipeline.chat(messages, sampling=sampling, max_tokens=settings.max_tokens, cancel=cancel)
        for event in answer:
            pieces = recorder.add(event.level, event.text)
            if pieces:
                show(pieces)
        stats = stats_dict(answer.stats)
    except Exception as error:
        show(recorder.flush())  # keep and show what came before the failure
        if isinstance(error, AssistantError):
            raise
        raise AssistantError(f"generation failed: {error}") from error
    show(recorder.flush(stats, complete=bool(stats) and stats.get("stop_reason") != "cancelled"))
    return stats or {"stop_reason": "cancelled" if cancel.is_set() else "unknown", "levels": []}
