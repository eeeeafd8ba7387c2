"""The public face of the coordinator: load a chain of GGUF files, stream tokens for a prompt or a chat."""

from __future__ import annotations

import os
import time
from pathlib import Path

from assistant.errors import AssistantError
from assistant.speculative.chain import Chain
from assistant.speculative.events import Generation, LevelStats, Sampling, Stats, TokenEvent
from assistant.speculative.levels import ModelLevel, NgramLevel
from assistant.speculative.policy import make_policy
from assistant.speculative.stopping import StopStrings

DEFAULT_CONFIDENCE = 0.3


class Pipeline:
    """A chain of levels, target first, each with its own llama.cpp context; generates losslessly."""

    def __init__(self, levels, n_ctx: int, draft_length, confidence: float, n_shared: int):
        self.levels = levels
        self.target = levels[0].model
        self.n_ctx = n_ctx
        self.roles = [level.role for level in levels]
        limited = [index for index, level in enumerate(levels) if not level.is_model]
        self.policy = make_policy(draft_length, len(levels), limited, confidence)
        self.chain = Chain(levels, n_shared, n_ctx)
        self._running = None

    @classmethod
    def load(cls, source, levels: int | None = None, n_ctx: int | None = None, threads: int | None = None,
             draft_length="adaptive", ngram: bool | None = None, confidence: float = DEFAULT_CONFIDENCE,
             target_rpc: str | None = None, progress=None) -> "Pipeline":
        """Load every GGUF once and make one context each.

        ``source``: a ModelSet or GGUF paths (target first); ``levels`` keeps the first N of them;
        ``n_ctx``: the context size; None takes 4096, or less where memory is short (engine/memory.py), and a
        set that does not fit even so is refused before anything loads;
        ``ngram`` adds the prompt-lookup drafter below the last model; by default the adaptive policy gets
        it under two or more models (it costs next to nothing, and the policy keeps it only where it pays);
        ``target_rpc`` (HOST:PORT of a ggml-rpc-server; default: the model set's) puts the target on that
        machine, the rest stays here; ``progress(done_bytes, total_bytes)`` follows the weights as they load.
        """
        from assistant.engine import Model, default_threads
        from assistant.engine.mapped_weights import choose_for
        from assistant.speculative.vocab import shared_vocab_size

        entries = _entries(source, levels)
        local = entries[1:] if target_rpc or getattr(source, "target_rpc", None) else entries
        choose_for([path for _, path in local])
        if hasattr(source, "check_fresh"):  # a draft made from an earlier target would no longer track it
            source.first(len(entries)).check_fresh()
        target_rpc = target_rpc or getattr(source, "target_rpc", None)
        make_policy(draft_length, 1)  # reject a bad value before loading anything
        n_ctx = context_size(source, levels, n_ctx, target_rpc)
        threads = threads or default_threads()
        sizes = [0 if index == 0 and target_rpc is not None else Path(path).stat().st_size
                 for index, (_, path) in enumerate(entries)]
        models = []
        try:
            for index, (_, path) in enumerate(entries):
                done = sum(sizes[:index])
                report = None if progress is None else (
                    lambda fraction, done=done, size=sizes[index]: progress(done + int(fraction * size), sum(sizes)))
                models.append(Model(path, vocab_only=index == 0 and target_rpc is not None, progress=report))
            n_shared = shared_vocab_size(models)
            chain = model_levels([(role, model) for (role, _), model in zip(entries, models)], n_ctx, threads,
                                 target_rpc, n_shared)
        except BaseException:
            for model in models:
                model.close()
            raise
        alone_by_choice = levels == 1 or not hasattr(source, "levels")  # --levels 1, or bare paths: one model
        if default_ngram(draft_length, len(chain), alone_by_choice) if ngram is None else ngram:
            chain.append(NgramLevel(capacity=n_ctx))
        return cls(chain, n_ctx, draft_length, confidence, n_shared)

    # --- generation -------------------------------------------------------------------------------
    def chat(self, messages: list[dict], sampling: Sampling = Sampling(), max_tokens: int = 512, stop=None,
             cancel=None, tools: list[dict] | None = None, grammar: str | None = None,
             special_text: bool = False) -> Generation:
        """Stream the answer to a conversation; the target GGUF's chat template makes the prompt (with ``tools``,
        OpenAI's function definitions, where the template takes them)."""
        from assistant.engine.chat_template import chat_prompt_tokens

        return self.generate(chat_prompt_tokens(self.target, messages, tools), sampling, max_tokens, stop, cancel,
                             grammar, special_text)

    def generate(self, prompt, sampling: Sampling = Sampling(), max_tokens: int = 512, stop=None,
                 cancel=None, grammar: str | None = None, special_text: bool = False) -> Generation:
        """Stream the continuation of ``prompt`` (text or token ids): iterate for the TokenEvents, then read the
        whole answer and its Stats from the Generation. ``grammar`` (GBNF) constrains the answer, at every
        level alike; a grammar llama.cpp refuses raises GrammarError before anything is generated.
        ``special_text``: control tokens in the answer show as their text (tool-call markers), not as nothing."""
        from assistant.engine.grammar import Grammar

        tokens = self.prompt_tokens(prompt)
        if len(tokens) >= self.n_ctx:
            raise AssistantError(
                f"the prompt has {len(tokens)} tokens but the context holds {self.n_ctx}: "
                "shorten it or raise the context size"
            )
        if isinstance(stop, str):
            stop = [stop]
        if max_tokens < 0:
            raise AssistantError(f"max_tokens must be 0 or more, not {max_tokens}")
        constraint = None if grammar is None else Grammar(self.target, grammar, len(tokens), self.chain.n_shared)
        return Generation(self._generate(tokens, sampling, max_tokens, stop, cancel, constraint, special_text))

    def tokenize(self, text: str) -> list[int]:
        return self.target.tokenize(text, add_special=True, parse_special=True)

    def detokenize(self, tokens: list[int]) -> str:
        return self.target.detokenize(tokens)

    def prompt_tokens(self, prompt) -> list[int]:
        """``prompt`` (text, or token ids checked against the vocabulary) as token ids; never empty."""
        if isinstance(prompt, str):
            tokens = self.tokenize(prompt)
        else:
            tokens = [int(token) for token in prompt]
            bad = [token for token in tokens if not 0 <= token < self.chain.n_shared]
            if bad:
                raise AssistantError(f"prompt token {bad[0]} is outside the vocabulary of {self.chain.n_shared} tokens")
        if not tokens:
            raise AssistantError("the prompt is empty")
        return tokens

    def _generate(self, prompt: list[int], sampling, max_tokens, stop, cancel, grammar=None, special_text=False):
        try:
            return (yield from self._stream(prompt, sampling, max_tokens, stop, cancel, grammar, special_text))
        finally:
            if grammar is not None:
                self.chain.grammar = None
                grammar.close()

    def _stream(self, prompt: list[int], sampling, max_tokens, stop, cancel, grammar, special_text):
        from assistant.engine import TextStream
        from assistant.engine.sequence import TokenSequence

        marker = object()
        self._running = marker
        began = time.perf_counter()
        decode_before = [_decode_seconds(level) for level in self.levels]
        chain = self.chain
        chain.start(TokenSequence(prompt), sampling, self.policy, grammar)
        prompt_seconds = time.perf_counter() - began
        cached_tokens = len(prompt) - self.levels[0].context.last_batch  # kept from the previous generation
        first_token_seconds = None
        text = TextStream(self.target, special_text)
        stops = StopStrings(stop)
        new_tokens, reason = 0, None
        while reason is None:
            if self._running is not marker:
                raise AssistantError("another generation started on this pipeline before this one finished")
            if cancel is not None and cancel.is_set():
                reason = "cancelled"
            elif new_tokens >= max_tokens:
                reason = "max_tokens"
            elif len(chain.sequence) >= self.n_ctx:
                reason = "context"
            if reason:
                break
            for token, level in chain.step(max_tokens - new_tokens):
                if self.target.is_end_of_generation(token):
                    reason = "eos"
                    break
                new_tokens += 1
                ready, stopped = stops.push(token, level, text.push(token))
                if ready and first_token_seconds is None:
                    first_token_seconds = time.perf_counter() - began
                for token_id, origin, piece in ready:
                    yield TokenEvent(token_id, piece, origin)
                if stopped:
                    reason = "stop"
                    break
                if new_tokens >= max_tokens:
                    reason = "max_tokens"
                    break
                if cancel is not None and cancel.is_set():
                    reason = "cancelled"
                    break
        if reason != "stop":
            tail = stops.flush()
            rest = text.flush()
            if rest and tail:
                tail[-1] = (tail[-1][0], tail[-1][1], tail[-1][2] + rest)
            if tail and first_token_seconds is None:
                first_token_seconds = time.perf_counter() - began
            for token_id, origin, piece in tail:
                yield TokenEvent(token_id, piece, origin)
        seconds = time.perf_counter() - began
        stats = self._stats(prompt, new_tokens, seconds, prompt_seconds, reason, decode_before, self.policy)
        stats.cached_tokens = cached_tokens
        stats.first_token_seconds = seconds if first_token_seconds is None else first_token_seconds
        return stats

    def _stats(self, prompt, new_tokens, seconds, prompt_seconds, reason, decode_before, policy) -> Stats:
        """Per-level counts and times, the chain shapes used (rounds each) and the policy's predictions."""
        levels = []
        for level, before in zip(self.levels, decode_before):
            stats = level.stats
            stats.acceptance = stats.accepted / stats.proposed if stats.proposed else 0.0
            stats.mean_accepted_length = (stats.accepted + level.rounds) / level.rounds if level.rounds else 0.0
            stats.seconds = _decode_seconds(level) - before
            levels.append(LevelStats(**vars(stats)))
        report = policy.report(self.roles)
        return Stats(levels, new_tokens, len(prompt), seconds, new_tokens / seconds if seconds > 0 else 0.0, reason,
                     report["shapes"], report["predicted"], prompt_seconds)

    @property
    def context_used(self) -> int:
        return len(self.levels[0].context.tokens)

    # --- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        for level in self.levels:
            if level.context is not None:
                level.context.close()
            if getattr(level, "model", None) is not None:
                level.model.close()
        self.levels = []

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def default_ngram(draft_length, models: int, alone_by_choice: bool = True) -> bool:
    """The adaptive policy gets the n-gram level under a chain of models, and under a model set's only model (a
    GGUF imported as it is); a target asked to run alone stays alone (that is what "speculation off" and
    ``--levels 1`` ask for)."""
    return draft_length == "adaptive" and (models > 1 or not alone_by_choice)


def model_levels(roles_and_models: list, n_ctx: int, threads: int, target_rpc: str | None = None,
                 n_shared: int | None = None) -> list[ModelLevel]:
    """One context per model, target first, each with the options its place in the chain needs; with
    ``target_rpc`` the target's context lives on that ggml-rpc-server (its model here holds the vocabulary)."""
    from assistant.engine import Context
    from assistant.engine.batch_invariance import kernels_in_use
    from assistant.engine.remote import RemoteContext

    target = roles_and_models[0][1]
    # a remote target's cache would cross the network to be copied: the drafters then evaluate the prompt
    geometry = target.attention_geometry() if target_rpc is None else None
    levels = []
    target_options = target_context_options(target.path, remote=target_rpc is not None)
    ours_attention = kernels_in_use().get("attention", "stock") != "stock"
    try:
        for index, (role, model) in enumerate(roles_and_models):
            shares = index > 0 and geometry is not None and model.attention_geometry() == geometry
            if index == 0:
                options = target_options
            else:  # a cache copied from the target keeps the target's layout (flash attention or not); the other
                # drafters take flash attention where it is ours (it reads each key once for a draft's queries),
                # else the plain graph, which batches them better than stock's one query at a time
                options = {"flash_attention": bool(target_options["flash_attention"]) if shares else ours_attention}
            if index == 0 and target_rpc is not None:
                context = RemoteContext(model, target_rpc, n_ctx=n_ctx, threads=threads, n_shared=n_shared, **options)
            else:
                context = Context(model, n_ctx=n_ctx, threads=threads, **options)
            levels.append(ModelLevel(role, model, context, shares_target_cache=shares))
    except BaseException:
        for level in levels:
            level.context.close()
        raise
    return levels


def target_context_options(model_path=None, remote: bool = False) -> dict:
    """How the target's context evaluates, so that plain decoding and verification round alike
    (engine/batch_invariance.py): one row a step with flash attention where our kernels compute every product
    and the attention of the model at ``model_path`` here; else two rows a step with the plain attention graph.
    A remote target keeps the latter (the server's build is not known here). The environment switches give
    llama.cpp's defaults back (the bench's baseline: ASSISTANT_TARGET_MIN_BATCH=1,
    ASSISTANT_TARGET_FLASH_ATTENTION=auto)."""
    from assistant.engine.batch_invariance import single_rows_match_batches

    ours = model_path is not None and not remote and single_rows_match_batches(model_path)
    flash = os.environ.get("ASSISTANT_TARGET_FLASH_ATTENTION", "on" if ours else "off")
    rows = os.environ.get("ASSISTANT_TARGET_MIN_BATCH", "1" if ours else "2")
    return {"min_batch": max(1, int(rows)), "flash_attention": {"auto": None, "on": True}.get(flash, False)}


def _decode_seconds(level) -> float:
    return level.context.decode_seconds if level.context is not None else 0.0


def context_size(source, levels: int | None = None, n_ctx: int | None = None, target_rpc: str | None = None) -> int:
    """The context size ``Pipeline.load`` will take for these arguments, after checking that the levels loaded
    here fit in memory (a one-line error where they do not): callers that must refuse before starting anything
    else ask first."""
    from assistant.engine.memory import fit_context

    entries = _entries(source, levels)
    remote = target_rpc or getattr(source, "target_rpc", None)
    for _, path in entries:
        if not Path(path).exists():
            raise AssistantError(f"{path}: no such GGUF file")
    return fit_context([path for index, (_, path) in enumerate(entries) if index > 0 or not remote], n_ctx)


def _entries(source, levels: int | None = None) -> list[tuple[str, Path]]:
    """(role, path) per level from a ModelSet or a list of paths, the first ``levels`` of them."""
    entries = _all_entries(source)
    if levels is not None:
        if not 1 <= levels <= len(entries):
            raise AssistantError(f"asked for {levels} levels but the chain has {len(entries)}")
        entries = entries[:levels]
    return entries


def _all_entries(source) -> list[tuple[str, Path]]:
    levels = getattr(source, "levels", None)
    if levels is not None:
        if not levels:
            raise AssistantError(f"model set {getattr(source, 'name', '?')!r} has no levels")
        return [(level.role, Path(level.path)) for level in levels]
    if isinstance(source, (str, Path)):
        source = [source]
    paths = [Path(path) for path in source]
    if not paths:
        raise AssistantError("no GGUF files given")
    return [("target" if index == 0 else f"draft{index}", path) for index, path in enumerate(paths)]
