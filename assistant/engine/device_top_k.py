"""What sampled verification with top-k needs of a row, chosen where the logits are: the ids and logits of its
``count`` largest logits (top_k and a few spare, see speculative/candidates.py), so that a target on another
machine sends back 8 bytes per candidate instead of a row of n_vocab floats.

ggml's top_k leaves its ids in no particular order; the logits are copied from the row as they are (get_rows), so
they are the very values a full row would have held.
"""

from __future__ import annotations

import numpy as np

from assistant.engine.device_sampler import DeviceSampler
from assistant.errors import AssistantError


class DeviceTopK(DeviceSampler):
    """The ``count`` largest of the first ``n_shared`` logits of each output row, with their ids."""

    name = b"assistant-top-k"

    def __init__(self, context_handle, n_shared: int):
        super().__init__(context_handle, n_shared)
        self.count = 0

    def take(self, count: int) -> None:
        """Take ``count`` candidates per row from now on (detached if attached with another count: a new graph)."""
        if count != self.count:
            self.detach()
            self.count = count

    def candidates(self, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, logits), each (rows, count), of the last decode's final ``rows`` outputs."""
        lib, context = self._lib, self._context
        ids = np.empty((rows, self.count), dtype=np.int32)
        logits = np.empty((rows, self.count), dtype=np.float32)
        for row in range(rows):
            index = row - rows
            if lib.llama_get_sampled_candidates_count_ith(context, index) != self.count or \
                    lib.llama_get_sampled_logits_count_ith(context, index) != self.count:
                raise AssistantError(f"llama.cpp returned no top-{self.count} candidates for output {index}")
            ids[row] = np.ctypeslib.as_array(lib.llama_get_sampled_candidates_ith(context, index), (self.count,))
            logits[row] = np.ctypeslib.as_array(lib.llama_get_sampled_logits_ith(context, index), (self.count,))
        return ids, logits

    def build(self, graph_context, data, shared, count: int) -> None:
        ggml = self._ggml
        top = ggml.ggml_top_k(graph_context, shared, min(self.count, count))
        data.candidates = top
        data.logits = ggml.ggml_get_rows(graph_context, ggml.ggml_reshape_2d(graph_context, shared, 1, count), top)
