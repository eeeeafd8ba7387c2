"""Logits to probabilities and draws, with the same processing at every level and no per-token allocation.

Every level applies temperature, top-k and top-p identically; that is what makes nested rejection
sampling exact. All vocab-sized work writes into buffers made once per generation.
"""

from __future__ import annotations

import numpy as np


class Sampler:
    """Temperature/top-k/top-p over a vocabulary of ``n_vocab`` ids, drawing from one seeded generator."""

    def __init__(self, sampling, n_vocab: int, rng: np.random.Generator):
        self.n_vocab = n_vocab
        self.inverse_temperature = 1.0 / sampling.temperature if sampling.temperature > 0 else 1.0
        self.top_k = sampling.top_k if 0 < sampling.top_k < n_vocab else 0
        self.top_p = sampling.top_p if 0.0 < sampling.top_p < 1.0 else 1.0
        self.rng = rng
        self._scratch = np.empty(n_vocab, dtype=np.float32)
        self._cumulative = np.empty(n_vocab, dtype=np.float64)
        self._mask = np.empty(n_vocab, dtype=bool)

    def probabilities(self, logits: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Write the processed distribution of one logits row into ``out`` (float32, n_vocab)."""
        np.multiply(logits, self.inverse_temperature, out=out)
        if self.top_k:
            scratch = self._scratch
            np.copyto(scratch, out)
            scratch.partition(self.n_vocab - self.top_k)
            np.less(out, scratch[self.n_vocab - self.top_k], out=self._mask)
        np.subtract(out, out.max(), out=out)
        np.exp(out, out=out)
        if self.top_k:
            np.copyto(out, 0.0, where=self._mask)
        np.multiply(out, 1.0 / out.sum(dtype=np.float64), out=out)
        if self.top_p < 1.0:
            self._keep_top_p(out)
        return out

    def _keep_top_p(self, probabilities: np.ndarray) -> None:
        """Keep the most likely tokens whose mass first reaches top_p (ties at the edge kept)."""
        scratch = self._scratch
        np.copyto(scratch, probabilities)
        scratch.sort()
        descending = scratch[::-1]
        np.cumsum(descending, out=self._cumulative)
        last = min(int(np.searchsorted(self._cumulative, self.top_p)), self.n_vocab - 1)
        np.less(probabilities, descending[last], out=self._mask)
        np.copyto(probabilities, 0.0, where=self._mask)
        np.multiply(probabilities, 1.0 / probabilities.sum(dtype=np.float64), out=probabilities)

    def draw(self, weights: np.ndarray) -> int:
        """One id drawn in proportion to ``weights`` (need not sum to one)."""
        cumulative = self._cumulative
        np.cumsum(weights, out=cumulative)
        target = self.rng.random() * cumulative[-1]
        return min(int(np.searchsorted(cumulative, target, side="right")), self.n_vocab - 1)

    def uniform(self) -> float:
        return self.rng.random()

    def residual_draw(self, p: np.ndarray, q: np.ndarray | None, rejected: int) -> int:
        """A draw from norm(max(p - q, 0)); ``q`` None means the draft was certain of ``rejected``."""
        residual = self._scratch
        if q is None:
            np.copyto(residual, p)
            residual[rejected] = 0.0
        else:
            np.subtract(p, q, out=residual)
            np.maximum(residual, 0.0, out=residual)
        if residual.sum(dtype=np.float64) <= 0.0:
            return self.draw(p)
        return self.draw(residual)


def top_probability(logits: np.ndarray, scratch: np.ndarray) -> float:
    """The softmax probability of the argmax, without a vocab-sized temporary."""
    np.subtract(logits, logits.max(), out=scratch)
    np.exp(scratch, out=scratch)
    return 1.0 / float(scratch.sum(dtype=np.float64))
