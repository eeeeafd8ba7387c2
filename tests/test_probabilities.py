"""The sampler's parts without a model: top-p's partial sort keeps exactly what a full sort keeps, a position's
noise depends on (seed, position) alone, and a choice with it is distributed as the processed distribution."""

import math

import numpy as np
import pytest

import assistant.speculative.probabilities as probabilities
from assistant.speculative import Sampling
from assistant.speculative.probabilities import PositionNoise, Sampler


@pytest.mark.parametrize("scale", [0.05, 1.0, 4.0, 12.0])
@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.95, 0.9999])
def test_top_p_over_the_largest_candidates_equals_a_full_sort(scale, top_p, monkeypatch):
    logits = (np.random.default_rng(int(scale * 100)).standard_normal(5000) * scale).astype(np.float32)
    logits[:40] = logits.max()  # ties at the edge
    sampler = Sampler(Sampling(0.8, 0, top_p, 1), logits.size)
    partial = sampler.probabilities(logits, np.empty(logits.size, np.float32)).copy()
    monkeypatch.setattr(probabilities, "TOP_P_CANDIDATES", logits.size)
    full = sampler.probabilities(logits, np.empty(logits.size, np.float32))
    assert np.array_equal(partial, full)


def test_a_positions_noise_depends_on_the_seed_and_position_alone(monkeypatch):
    monkeypatch.setattr(probabilities, "NOISE_POSITIONS", 3)  # evictions on the way
    first, second = PositionNoise(7, 100), PositionNoise(7, 100)
    forward = [first.at(position).copy() for position in range(10)]
    backward = [second.at(position).copy() for position in reversed(range(10))][::-1]
    assert all(np.array_equal(a, b) for a, b in zip(forward, backward))
    assert not np.array_equal(forward[0], forward[1])
    assert not np.array_equal(PositionNoise(8, 100).at(0), forward[0])
    assert np.array_equal(PositionNoise(7 + 2**64, 100).at(3), forward[3])  # seeds are taken modulo 2**64


def test_a_choice_is_distributed_as_the_processed_distribution():
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0], dtype=np.float32)
    sampling = Sampling(temperature=0.9, top_k=5)
    expected = Sampler(sampling, logits.size).probabilities(logits, np.empty(logits.size, np.float32)).copy()
    samples = 6000
    counts = np.zeros(logits.size)
    out = np.empty(logits.size, np.float32)
    for seed in range(samples):
        sampler = Sampler(sampling.__class__(0.9, 5, 1.0, seed), logits.size)
        counts[sampler.choose(sampler.probabilities(logits, out), 11)] += 1
    assert counts[5] == 0  # outside top-k
    kept = expected > 0
    statistic = float((((counts - samples * expected) ** 2)[kept] / (samples * expected[kept])).sum())
    dof = int(kept.sum()) - 1
    z = ((statistic / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    assert 0.5 * math.erfc(z / math.sqrt(2)) > 1e-3
