"""Logits to probabilities and choices, with the same processing at every level and no per-token allocation.

Sampling is coupled by position (the Gumbel-max trick, as in drafter-invariant speculative decoding): the token
at sequence position t is argmax_i p_i / E_i over the processed distribution p, where E ~ Exp(1) per token is
noise drawn from (seed, t) alone. Every level chooses with the same noise, so a draft proposes what its own model
would sample and the verifier keeps it exactly when its own choice is the same token. Since position t's noise is
independent of the earlier positions' (which made the prefix), each token is distributed as p given its prefix:
the answer is the target's own sample for that seed, whatever drafted it, however the policy shaped the rounds.
So a seed reproduces its text while the adaptive policy follows the machine's timings.

Every level applies temperature, top-k and top-p identically. All vocab-sized work writes into buffers made
once per generation; the noise of a position is drawn once and shared by the levels that choose there.
"""

from __future__ import annotations

import secrets

import numpy as np

TOP_P_CANDIDATES = 256  # sorted first for top-p; a flatter distribution sorts 8 times as many, and so on
NOISE_POSITIONS = 64  # noise rows kept: a round's positions (at most a verification's 16) at every level


class PositionNoise:
    """``at(t)``: 1 / E for E ~ Exp(1) per token, a function of (seed, t) alone (float32, n_vocab)."""

    def __init__(self, seed: int, n_vocab: int):
        self.seed = seed % 2**64
        self.n_vocab = n_vocab
        self._rows: dict[int, np.ndarray] = {}

    def at(self, position: int) -> np.ndarray:
        row = self._rows.get(position)
        if row is None:
            if len(self._rows) >= NOISE_POSITIONS:
                del self._rows[min(self._rows)]
            generator = np.random.Generator(np.random.PCG64([self.seed, position]))
            row = generator.standard_exponential(self.n_vocab, dtype=np.float32)
            np.maximum(row, np.finfo(np.float32).tiny, out=row)
            np.reciprocal(row, out=row)
            self._rows[position] = row
        return row


class Sampler:
    """Temperature/top-k/top-p over a vocabulary of ``n_vocab`` ids, choosing with one seed's position noise
    (a fresh random seed when ``sampling.seed`` is None)."""

    def __init__(self, sampling, n_vocab: int):
        self.n_vocab = n_vocab
        self.inverse_temperature = 1.0 / sampling.temperature if sampling.temperature > 0 else 1.0
        self.top_k = sampling.top_k if 0 < sampling.top_k < n_vocab else 0
        self.top_p = sampling.top_p if 0.0 < sampling.top_p < 1.0 else 1.0
        self.noise = PositionNoise(secrets.randbits(64) if sampling.seed is None else sampling.seed, n_vocab)
        self._scratch = np.empty(n_vocab, dtype=np.float32)
        self._cumulative = np.empty(n_vocab, dtype=np.float64)
        self._mask = np.empty(n_vocab, dtype=bool)

    @property
    def truncates(self) -> bool:
        """Whether top-k or top-p cut the distribution (the cut then depends on what else is allowed)."""
        return bool(self.top_k) or self.top_p < 1.0

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
        """Keep the most likely tokens whose mass first reaches top_p (ties at the edge kept).

        Only the largest ``count`` are sorted, more only where they hold less than top_p: the same edge as a
        sort of the whole vocabulary (the same values in the same order), at a fraction of its cost."""
        n_vocab, scratch = self.n_vocab, self._scratch
        count = min(TOP_P_CANDIDATES, n_vocab)
        while True:
            np.copyto(scratch, probabilities)
            if count < n_vocab:
                scratch.partition(n_vocab - count)
            largest = scratch[n_vocab - count:]
            largest.sort()
            descending = largest[::-1]
            cumulative = np.cumsum(descending, out=self._cumulative[:count])
            if cumulative[-1] >= self.top_p or count == n_vocab:
                break
            count = min(8 * count, n_vocab)
        last = min(int(np.searchsorted(cumulative, self.top_p)), count - 1)
        np.less(probabilities, descending[last], out=self._mask)
        np.copyto(probabilities, 0.0, where=self._mask)
        np.multiply(probabilities, 1.0 / probabilities.sum(dtype=np.float64), out=probabilities)

    def choose(self, probabilities: np.ndarray, position: int) -> int:
        """The token sampled at sequence ``position`` from ``probabilities`` (a processed distribution)."""
        return int(self.scores(probabilities, position).argmax())

    def scores(self, probabilities: np.ndarray, position: int) -> np.ndarray:
        """Each token's p / E at ``position``: the sample is the highest, and among some tokens (those a grammar
        allows) the highest of theirs is the sample of the distribution restricted to them."""
        return np.multiply(probabilities, self.noise.at(position), out=self._scratch)


def top_probability(logits: np.ndarray, scratch: np.ndarray) -> float:
    """The softmax probability of the argmax, without a vocab-sized temporary."""
    np.subtract(logits, logits.max(), out=scratch)
    np.exp(scratch, out=scratch)
    return 1.0 / float(scratch.sum(dtype=np.float64))
