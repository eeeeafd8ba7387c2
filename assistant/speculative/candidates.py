"""Rows of logits rebuilt from each row's top candidates: sampled verification with top-k over a target whose
logits are elsewhere (a remote target) reads only the ids and logits of each row's largest ones.

With top_k > 0 the processed distribution p of a row is supported on its top_k largest logits (and any token tied
with the k-th), so those determine it. A row rebuilt as -inf everywhere but its candidates gives the Sampler bit
for bit the p it computes from the full row: the kept values sit at the same places, and where the full row's
values are masked to 0 the rebuilt row's exp(-inf) is 0 too, so even the sum adds the same numbers in the same
order. The device sends top_k + SPARE candidates. Where the last of them, after temperature, still equals the
k-th largest, a token outside them may tie with the k-th and belong to p: that row is fetched in full (the
context evaluates the rows again without its device sampler). With top_k == 0 (the default of generate, serve
and the chat) p may need any token, so every row is fetched in full.
"""

from __future__ import annotations

import numpy as np

SPARE = 4  # candidates past top_k: a tie at the k-th value reaching past them costs a second evaluation


def candidate_count(sampler) -> int:
    """How many candidates per row to ask for; 0 where the sampler needs whole rows (no top-k)."""
    return min(sampler.top_k + SPARE, sampler.n_vocab) if sampler.top_k else 0


class CandidateRows:
    """``rows(j)``: row j of ``context``'s evaluation of ``sequence`` from ``first_output``, over the shared
    vocabulary, as the Sampler may read it; written into ``out`` (reused, valid until the next call)."""

    def __init__(self, context, sequence, first_output: int, sampler, out: np.ndarray):
        self.context, self.sequence, self.first_output = context, sequence, first_output
        self.sampler = sampler
        self.out = out
        self.count = candidate_count(sampler)
        ids, logits = context.candidates(sequence, first_output, self.count)
        self.ids, self.logits = np.array(ids), np.array(logits)  # the context's views change with its next call
        self.full = None  # the whole rows, once a tie made them needed
        self.refetched = 0

    def __call__(self, j: int) -> np.ndarray:
        if self.full is None and not self.covers(self.logits[j]):
            self.full = self.context.evaluate(self.sequence, self.first_output)
            self.refetched += 1
        if self.full is not None:
            return self.full[j, : len(self.out)]
        self.out.fill(-np.inf)
        self.out[self.ids[j]] = self.logits[j]
        return self.out

    def covers(self, logits: np.ndarray) -> bool:
        """Whether these candidates hold every token the Sampler's top-k keeps: all of the vocabulary, or a last
        candidate below the k-th largest after temperature (so no token outside them ties with it)."""
        if self.count >= len(self.out):
            return True
        scaled = np.sort(logits * self.sampler.inverse_temperature)  # float32, as the Sampler scales
        return bool(scaled[0] < scaled[self.count - self.sampler.top_k])
