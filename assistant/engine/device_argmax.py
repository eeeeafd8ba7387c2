"""Greedy choices made where the logits are: each row's argmax in llama.cpp's graph, so that a target on another
machine sends back one token id per row instead of a row of n_vocab floats.

ggml's argmax keeps the first of equal maxima, as numpy's does, so the choices are the ones the coordinator
would make from the logits of the shared vocabulary.
"""

from __future__ import annotations

import numpy as np

from assistant.engine.device_sampler import DeviceSampler


class DeviceArgmax(DeviceSampler):
    """An argmax over the first ``n_shared`` logits of each output row."""

    name = b"assistant-argmax"

    def choices(self, rows: int) -> np.ndarray:
        """The argmax of each of the last decode's final ``rows`` outputs."""
        choose = self._lib.llama_get_sampled_token_ith
        return np.array([choose(self._context, row - rows) for row in range(rows)], dtype=np.int32)

    def build(self, graph_context, data, shared, count: int) -> None:
        data.sampled = self._ggml.ggml_argmax(graph_context, shared)
        data.logits = None  # nothing else to copy back
