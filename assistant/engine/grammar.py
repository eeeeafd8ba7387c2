"""A llama.cpp grammar (GBNF) followed along a generation: which tokens may come next at each position.

The chain proposes, rejects and re-proposes tokens, so the grammar's state is kept for every position from where
the answer began: appending a token clones the last state and advances it, cutting the sequence back drops the
states past the cut. llama.cpp aborts the process when a grammar is advanced by a token it forbids, so nothing is
advanced without being checked first.

Checking one token is cheap; masking the whole vocabulary walks every token's text through the grammar. Greedy,
and sampling without top-k or top-p, a choice is the highest score among the allowed tokens (the logit, or the
probability over the position's noise), so ``best`` checks the unmasked winner, then the next best few, and
masks the whole vocabulary only when none of them is allowed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile

import numpy as np

from assistant.engine.backend import llama
from assistant.errors import AssistantError

_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
CANDIDATES = 64  # best-scoring tokens checked together before the whole vocabulary is masked


@contextlib.contextmanager
def _stderr_captured():
    """What native code writes to standard error meanwhile, kept from the terminal: yields a function giving
    its lines once the block has ended."""
    lines: list[str] = []
    with tempfile.TemporaryFile() as capture:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        try:
            yield lambda: lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines += capture.read().decode("utf-8", errors="replace").splitlines()


class GrammarError(AssistantError):
    """llama.cpp refused the grammar's text."""


class Grammar:
    """``text`` (GBNF, root rule ``root``) over ``model``'s vocabulary, for an answer starting at sequence
    position ``start``; ``n_vocab`` ids are the ones the levels choose among (the shared vocabulary)."""

    def __init__(self, model, text: str, start: int, n_vocab: int):
        lib = llama()
        with _stderr_captured() as printed:
            root = lib.llama_sampler_init_grammar(model.vocab, text.encode(), b"root")
        if not root:  # llama.cpp prints the parse error itself: it goes into our one line instead
            reason = next((line.split("error parsing grammar:", 1)[1].strip() for line in printed()
                           if "error parsing grammar:" in line), "it does not parse")
            raise GrammarError(f"llama.cpp refused the grammar: {reason}")
        self._lib = lib
        self.start = start
        self._states = [root]  # _states[k]: after the answer's first k tokens
        self._one = np.zeros(1, dtype=_TOKEN_DATA)
        self._some = np.zeros(min(CANDIDATES, n_vocab), dtype=_TOKEN_DATA)
        self._all = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        self._all["id"] = np.arange(n_vocab, dtype=np.int32)
        self._masked = np.empty(n_vocab, dtype=np.float32)
        self.masks = 0  # whole-vocabulary masks computed, for the statistics

    # --- following the sequence -------------------------------------------------------------------
    def allows(self, position: int, token: int) -> bool:
        """Whether ``token`` may stand at sequence ``position`` (the states up to it must be known)."""
        return self._allows(self._state(position), token)

    def append(self, token: int) -> None:
        """The answer grew by ``token``, which the grammar allows there."""
        state = self._lib.llama_sampler_clone(self._states[-1])
        self._lib.llama_sampler_accept(state, token)
        self._states.append(state)

    def truncate(self, length: int) -> None:
        """The sequence was cut back to ``length`` tokens."""
        keep = max(1, length - self.start + 1)
        while len(self._states) > keep:
            self._lib.llama_sampler_free(self._states.pop())

    def allowed_prefix(self, position: int, tokens: list[int]) -> list[int]:
        """The longest opening of ``tokens``, proposed for ``position`` on, that the grammar allows (the n-gram
        level's lookup, cut where it leaves the grammar)."""
        lib, state, kept = self._lib, self._state(position), []
        scratch = None
        for token in tokens:
            if not self._allows(state, token):
                break
            kept.append(token)
            if len(kept) < len(tokens):
                following = lib.llama_sampler_clone(state)
                lib.llama_sampler_accept(following, token)
                if scratch is not None:
                    lib.llama_sampler_free(scratch)
                scratch = state = following
        if scratch is not None:
            lib.llama_sampler_free(scratch)
        return kept

    # --- choosing under the grammar ---------------------------------------------------------------
    def masked(self, position: int, logits: np.ndarray) -> np.ndarray:
        """``logits`` with every token the grammar forbids at ``position`` at -inf (a buffer reused per call)."""
        data = self._all
        data["logit"] = logits
        self._apply(self._state(position), data)
        self.masks += 1
        np.copyto(self._masked, data["logit"])
        return self._masked

    def best(self, position: int, scores: np.ndarray) -> int:
        """The allowed token of highest score at ``position`` (the lowest id among equals, as argmax takes)."""
        token = int(scores.argmax())
        state = self._state(position)
        if self._allows(state, token):
            return token
        some = self._some
        top = np.argpartition(scores, -some.shape[0])[-some.shape[0]:]
        top = top[np.lexsort((top, -scores[top]))]
        some["id"], some["logit"] = top, 0.0
        self._apply(state, some)
        allowed = np.flatnonzero(np.isfinite(some["logit"]))
        if allowed.size:
            return int(top[allowed[0]])
        masked = self.masked(position, scores)
        token = int(masked.argmax())
        if not np.isfinite(masked[token]):
            raise AssistantError("the grammar allows no token here: the constrained answer cannot go on")
        return token

    def close(self) -> None:
        self.truncate(self.start)
        if self._states:
            self._lib.llama_sampler_free(self._states.pop())

    # --- llama.cpp ---------------------------------------------------------------------------------
    def _state(self, position: int):
        index = position - self.start
        if not 0 <= index < len(self._states):
            raise IndexError(f"no grammar state for position {position} (answer from {self.start}, "
                             f"{len(self._states)} states)")
        return self._states[index]

    def _allows(self, state, token: int) -> bool:
        one = self._one
        one["id"], one["logit"] = token, 0.0
        self._apply(state, one)
        return bool(np.isfinite(one["logit"][0]))

    def _apply(self, state, data: np.ndarray) -> None:
        lib = self._lib
        array = lib.llama_token_data_array(
            data.ctypes.data_as(lib.llama_token_data_p), data.shape[0], -1, False)
        lib.llama_sampler_apply(state, ctypes.byref(array))
