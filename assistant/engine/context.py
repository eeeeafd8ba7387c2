"""One llama.cpp context (one KV cache) that remembers which tokens it has evaluated.

``evaluate(sequence, first_output)`` makes the cache hold exactly ``sequence`` and returns the logits of
the positions from ``first_output`` on, as a numpy view of llama.cpp's own buffer (no copy). Only the
tail that differs from what the cache already holds is removed (llama_memory_seq_rm) and evaluated, in
one batch.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from assistant.engine.backend import NativeHandle, llama
from assistant.engine.device_argmax import DeviceArgmax
from assistant.engine.device_top_k import DeviceTopK
from assistant.engine.sequence import TokenSequence
from assistant.errors import AssistantError


MAX_CHOICE_ROWS = 64  # rows an evaluation may output when choices are made in the graph (a draft is <= 16)


class Context(NativeHandle):
    """A KV cache over one model; ``tokens`` is what it holds, ``decode_seconds`` what decoding cost."""

    def __init__(self, model, n_ctx: int = 4096, threads: int = 1, n_batch: int | None = None,
                 flash_attention: bool | None = None, min_batch: int = 1, choices_for: int | None = None):
        """``choices_for``: make ``choose`` and ``candidates`` available, their argmax and top candidates over the
        first ``choices_for`` logits (the shared vocabulary) computed in the graph; an evaluation then outputs at
        most MAX_CHOICE_ROWS rows."""
        lib = llama()
        self.model = model
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch or n_ctx
        params.n_ubatch = min(params.n_batch, 512)
        params.n_seq_max = 1
        params.n_threads = threads
        params.n_threads_batch = threads
        params.no_perf = True
        if flash_attention is not None:  # None leaves llama.cpp's automatic choice
            params.flash_attn_type = int(flash_attention)
        if choices_for:  # llama.cpp sizes its buffers for backend sampling by these
            params.n_outputs_max = params.n_outputs_max_per_seq = MAX_CHOICE_ROWS
        handle = lib.llama_init_from_model(model.handle, params)
        if not handle:
            raise AssistantError(f"{model.path}: llama.cpp could not create a context of {n_ctx} tokens")
        self.handle = handle
        self._argmax = DeviceArgmax(handle, choices_for) if choices_for else None
        self._top_k = DeviceTopK(handle, choices_for) if choices_for else None
        self._in_graph = None  # the device sampler attached now, if any: llama.cpp holds one per sequence
        self.chooses = self._argmax is not None  # the chain may call choose() or candidates() instead of evaluate()
        self.n_ctx = lib.llama_n_ctx(handle)
        self.n_batch = lib.llama_n_batch(handle)
        self.n_vocab = model.n_vocab
        self._own_ids = None  # a draft with a vocabulary of its own: target id -> own id (the stand-in where none)
        self._own_width = getattr(model, "n_own_vocab", model.n_vocab)  # its logits' width
        if getattr(model, "target_ids", None) is not None:
            if choices_for:
                raise AssistantError(f"{model.path}: a draft with a vocabulary of its own makes no choices in its graph")
            stand_in = int(np.flatnonzero(model.target_ids < 0)[0]) if (model.target_ids < 0).any() else 0
            self._own_ids = np.full(model.n_vocab, stand_in, dtype=np.int32)
            kept = model.target_ids >= 0
            self._own_ids[model.target_ids[kept]] = np.flatnonzero(kept)
            self._kept_columns = np.flatnonzero(kept)  # own logits that stand for a target token...
            self._target_columns = model.target_ids[kept]  # ...and which one
            self._wide = np.empty((0, model.n_vocab), dtype=np.float32)
        self.tokens: list[int] = []
        # With min_batch 2 a lone token is evaluated together with the one before it, and both output logits:
        # stock llama.cpp computes a matmul of one row another way (vec_dot instead of llamafile's sgemm, which
        # declines n < 2) with different rounding, and the last layer only computes the rows that output. With
        # at least two rows everywhere, plain decoding and batched verification agree bitwise. A model whose
        # products and attention all run on our kernels needs none of this (engine/batch_invariance.py).
        self.min_batch = min_batch
        self.decode_seconds = 0.0
        self.decode_calls = 0
        self.last_batch = 0  # tokens the latest evaluate() decoded
        self._lib = lib
        self._memory = lib.llama_get_memory(handle)
        self._batch = lib.llama_batch_init(self.n_batch, 0, 1)
        capacity = self.n_batch
        self._batch_tokens = np.ctypeslib.as_array(self._batch.token, shape=(capacity,))
        self._batch_positions = np.ctypeslib.as_array(self._batch.pos, shape=(capacity,))
        self._batch_outputs = np.ctypeslib.as_array(self._batch.logits, shape=(capacity,))
        np.ctypeslib.as_array(self._batch.n_seq_id, shape=(capacity,))[:] = 1
        for index in range(capacity):
            self._batch.seq_id[index][0] = 0
        self._positions = np.arange(self.n_ctx, dtype=np.int32)
        self._logits_address = 0
        self._logits_view = None
        self._sequence_id = None

    def evaluate(self, sequence: TokenSequence, first_output: int) -> np.ndarray:
        """Hold ``sequence`` in the cache; logits of positions ``first_output``.. (rows, n_vocab), a view.

        The view is valid until the next call on this context.
        """
        self._attach(None)
        end, outputs_from = self._hold(sequence, first_output)
        rows = self._logits(end - outputs_from)[first_output - outputs_from :]
        return rows if self._own_ids is None else self._widened(rows)

    def _widened(self, rows: np.ndarray) -> np.ndarray:
        """A draft's own logits spread over the target's vocabulary, -inf for the tokens it lacks."""
        if self._wide.shape[0] < rows.shape[0]:
            self._wide = np.full((max(rows.shape[0], 2 * self._wide.shape[0]), self.n_vocab), -np.inf,
                                 dtype=np.float32)
        wide = self._wide[: rows.shape[0]]
        wide[:, self._target_columns] = rows[:, self._kept_columns]
        return wide

    def choose(self, sequence: TokenSequence, first_output: int) -> np.ndarray:
        """As ``evaluate``, but only the argmax of each row (over the shared vocabulary), computed where the
        logits are: what greedy verification reads, without the logits crossing to this process."""
        if not self._attach(self._argmax):
            raise AssistantError(f"{self.model.path}: llama.cpp refused the argmax in its graph")
        end, _ = self._hold(sequence, first_output)
        return self._argmax.choices(end - first_output)

    def candidates(self, sequence: TokenSequence, first_output: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """As ``evaluate``, but only the ``count`` largest logits of each row (over the shared vocabulary) and their
        ids, (rows, count) each in no particular order, chosen where the logits are: what sampled verification
        with top-k reads (speculative/candidates.py)."""
        self._top_k.take(count)
        if not self._attach(self._top_k):
            raise AssistantError(f"{self.model.path}: llama.cpp refused the top-k candidates in its graph")
        end, _ = self._hold(sequence, first_output)
        return self._top_k.candidates(end - first_output)

    def _attach(self, sampler) -> bool:
        """Make ``sampler`` (None: none) the device sampler in the graph, detaching the one there before."""
        if self._in_graph is not None and self._in_graph is not sampler:
            self._in_graph.detach()
        self._in_graph = sampler
        return sampler is None or sampler.attach()

    def _hold(self, sequence: TokenSequence, first_output: int) -> tuple[int, int]:
        """Evaluate what the cache lacks of ``sequence``; (its end, the first position that output logits)."""
        tokens = sequence.tokens
        end = check_evaluation(tokens, first_output, self.n_ctx)
        keep = min(self._shared_prefix(sequence), first_output)
        outputs_from = first_output
        if self.min_batch > 1:
            keep = min(keep, max(0, end - self.min_batch))
            outputs_from = min(first_output, max(0, end - self.min_batch))
        if keep < len(self.tokens):
            if not self._lib.llama_memory_seq_rm(self._memory, 0, keep, -1):
                self._lib.llama_memory_clear(self._memory, True)
                keep = 0
            del self.tokens[keep:]
        start = keep
        self.last_batch = end - keep
        while start < end:
            stop = min(end, start + self.n_batch)
            self._decode(tokens, start, stop, max(outputs_from, start))
            start = stop
        self.tokens.extend(tokens[keep:end])
        return end, outputs_from

    def adopt_cache(self, source: "Context") -> bool:
        """Take a copy of ``source``'s whole cache instead of evaluating its tokens; False if refused.

        For a model with the same attention geometry as ``source``'s (the MXFP4 copy of the target): its
        keys and values then come from the other model, which is fine for a drafter and saves evaluating a
        long prompt twice. llama.cpp checks the layout and refuses a cache that does not fit.
        """
        lib = self._lib
        size = lib.llama_state_seq_get_size(source.handle, 0)
        # an uninitialised buffer, and no clearing of the whole cache first (setting the sequence replaces it):
        # zeroing the two cost about as much as the copy itself
        state = np.empty(size, dtype=np.uint8)
        buffer = state.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        written = lib.llama_state_seq_get_data(source.handle, buffer, size, 0)
        self.tokens.clear()
        self._sequence_id = None
        if not written or lib.llama_state_seq_set_data(self.handle, buffer, written, 0) != written:
            self.reset()
            return False
        self.tokens = list(source.tokens)
        return True

    def reset(self) -> None:
        """Forget everything in the cache."""
        self._lib.llama_memory_clear(self._memory, True)
        self.tokens.clear()
        self._sequence_id = None

    def behind(self, sequence: TokenSequence) -> int:
        """About how many tokens of ``sequence`` the next evaluate() must decode before its new ones (at
        most: tokens appended since this cache last synced count even if they equal what it holds)."""
        if self._sequence_id == id(sequence) and sequence.tracks(self):
            return len(sequence) - min(len(self.tokens), sequence.floor(self))
        return len(sequence) - common_prefix(self.tokens, sequence.tokens)

    def _shared_prefix(self, sequence: TokenSequence) -> int:
        """How many leading tokens the cache holds that ``sequence`` still starts with."""
        held = self.tokens
        if self._sequence_id == id(sequence) and sequence.tracks(self):
            shared = min(sequence.take_floor(self), len(held))
        else:
            shared = common_prefix(held, sequence.tokens)
            sequence.track(self)
            self._sequence_id = id(sequence)
        limit = min(len(held), len(sequence.tokens))
        tokens = sequence.tokens
        while shared < limit and held[shared] == tokens[shared]:
            shared += 1
        return shared

    def _decode(self, tokens: list[int], start: int, stop: int, first_output: int) -> None:
        count = stop - start
        batch = self._batch
        batch.n_tokens = count
        ids = tokens[start:stop]
        if self._own_ids is not None:  # a draft with a vocabulary of its own reads its own ids
            ids = self._own_ids[ids]
        if count == 1:
            self._batch_tokens[0] = ids[0]
            self._batch_positions[0] = start
            self._batch_outputs[0] = first_output <= start
        else:
            self._batch_tokens[:count] = ids
            self._batch_positions[:count] = self._positions[start:stop]
            self._batch_outputs[:count] = 0
            self._batch_outputs[first_output - start : count] = 1
        began = time.perf_counter()
        status = self._lib.llama_decode(self.handle, batch)
        self.decode_seconds += time.perf_counter() - began
        self.decode_calls += 1
        if status != 0:
            self.tokens.clear()
            self._lib.llama_memory_clear(self._memory, True)
            raise AssistantError(f"{self.model.path}: llama_decode failed with status {status} at position {start}")

    def _logits(self, rows: int) -> np.ndarray:
        pointer = self._lib.llama_get_logits(self.handle)
        address = ctypes.addressof(pointer.contents)
        view = self._logits_view
        if address != self._logits_address or view is None or view.shape[0] < rows:
            view = np.ctypeslib.as_array(pointer, shape=(max(rows, 1), self._own_width))
            self._logits_address = address
            self._logits_view = view
        return view[:rows]

    def close(self) -> None:
        if getattr(self, "handle", None):
            self._attach(None)
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self.handle)
            self.handle = None


def check_evaluation(tokens: list[int], first_output: int, n_ctx: int) -> int:
    """The sequence's length, once it is known to fit ``n_ctx`` and to hold the first position asked for."""
    end = len(tokens)
    if not 0 <= first_output < end:
        raise ValueError(f"first_output {first_output} outside the sequence of {end} tokens")
    if end > n_ctx:
        raise AssistantError(f"the conversation needs {end} tokens but the context holds {n_ctx}")
    return end


def common_prefix(a: list[int], b: list[int]) -> int:
    count = min(len(a), len(b))
    if count == 0:
        return 0
    if a[:count] == b[:count]:  # the usual case (a cache behind its sequence), and 4x cheaper than numpy's
        return count
    left = np.asarray(a[:count], dtype=np.int64)
    right = np.asarray(b[:count], dtype=np.int64)
    differ = np.flatnonzero(left != right)
    return int(differ[0]) if differ.size else count
