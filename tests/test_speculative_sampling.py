"""Stochastic verification is exact: sampled continuations of 2- and 3-level chains follow the target's
own distribution (chi-square goodness of fit against probabilities computed from the target's logits),
and the same test rejects a chain that uses a wrong acceptance rule."""

import math
from collections import Counter

import numpy as np
import pytest

from assistant.engine import Context
from assistant.engine.sequence import TokenSequence
from assistant.speculative import Pipeline, Sampling
from assistant.speculative.policy import ConstantLength

PROMPT = "import os\nimport sys\nimport re\nimport"  # repetitive, so the n-gram drafter has material
TEMPERATURE, TOP_K, LENGTH = 1.5, 3, 3  # three tokens of three choices each: 27 outcomes
SAMPLES = 800


def processed(logits):
    """Temperature then top-k, written independently of the coordinator's own sampler."""
    scaled = np.asarray(logits, dtype=np.float64) / TEMPERATURE
    keep = np.argsort(scaled)[-TOP_K:]
    weights = np.exp(scaled[keep] - scaled[keep].max())
    return dict(zip(keep.tolist(), (weights / weights.sum()).tolist()))


def exact_distribution(model, prompt):
    """P(continuation) for every LENGTH-token continuation, from the target's logits alone."""
    outcomes = {}
    with Context(model, n_ctx=256, threads=1) as context:
        def walk(prefix, probability):
            if len(prefix) == LENGTH:
                outcomes[tuple(prefix)] = probability
                return
            sequence = TokenSequence(prompt + prefix)
            choices = processed(context.evaluate(sequence, len(sequence) - 1)[0])
            for token, p in choices.items():
                walk(prefix + [token], probability * p)
        walk([], 1.0)
    return outcomes


def chi_square_p_value(counts, expected_probabilities, samples):
    """Pearson's statistic with small-expectation cells pooled; p from the Wilson-Hilferty approximation."""
    cells, pooled_observed, pooled_expected = [], 0, 0.0
    for outcome, probability in expected_probabilities.items():
        expected = probability * samples
        if expected < 5:
            pooled_observed += counts.get(outcome, 0)
            pooled_expected += expected
        else:
            cells.append((counts.get(outcome, 0), expected))
    unexpected = samples - sum(counts.get(outcome, 0) for outcome in expected_probabilities)
    pooled_observed += unexpected
    if pooled_expected > 0 or pooled_observed:
        cells.append((pooled_observed, max(pooled_expected, 1e-9)))
    statistic = sum((observed - expected) ** 2 / expected for observed, expected in cells)
    dof = len(cells) - 1
    z = ((statistic / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


def sample_counts(pipeline, prompt_tokens, samples=SAMPLES):
    """Continuations per outcome over ``samples`` seeds, and how many tokens the lowest level proposed."""
    counts, proposed = Counter(), 0
    for seed in range(samples):
        sampling = Sampling(temperature=TEMPERATURE, top_k=TOP_K, seed=seed)
        answer = pipeline.generate(prompt_tokens, sampling=sampling, max_tokens=LENGTH).finish()
        counts[tuple(answer.tokens)] += 1
        proposed += answer.stats.levels[-1].proposed
    return counts, proposed


@pytest.fixture(scope="module")
def reference(bench_gguf):
    with Pipeline.load([bench_gguf["target_bf16"]], n_ctx=256) as target:
        prompt = target.tokenize(PROMPT)
        distribution = exact_distribution(target.target, prompt)
    assert sum(distribution.values()) == pytest.approx(1.0)
    assert len(distribution) == TOP_K**LENGTH
    return prompt, distribution


def ignore_draft_probability(uniform, p_token, q_token):
    """A plausible bug: accept with probability p instead of min(1, p/q)."""
    return uniform < p_token


@pytest.mark.parametrize("levels", ["target_bf16 draft_bf16", "target_bf16 target_mxfp4 draft_bf16",
                                    pytest.param("target_bf16 ngram", marks=pytest.mark.slow)])
def test_sampled_continuations_follow_the_target(bench_gguf, reference, levels):
    prompt, distribution = reference
    names = levels.split()
    paths = [bench_gguf[name] for name in names if name != "ngram"]
    with Pipeline.load(paths, n_ctx=256, draft_length=2, ngram="ngram" in names) as pipeline:
        counts, proposed = sample_counts(pipeline, prompt)
    assert proposed > SAMPLES / 4  # the lowest level really drafted
    assert chi_square_p_value(counts, distribution, SAMPLES) > 1e-3


def test_the_check_catches_a_wrong_acceptance_rule(bench_gguf, reference):
    prompt, distribution = reference
    with Pipeline.load([bench_gguf["target_bf16"], bench_gguf["draft_bf16"]], n_ctx=256, draft_length=2,
                       accept=ignore_draft_probability) as pipeline:
        counts, _ = sample_counts(pipeline, prompt)
    assert chi_square_p_value(counts, distribution, SAMPLES) < 1e-6


class SwitchShapes(ConstantLength):
    """The adaptive policy's freedom, forced: every round the target takes the next of these chain shapes,
    so one generation verifies the MXFP4 copy, the small draft directly, both, and nothing."""

    SHAPES = ((0, 2), (0, 1, 2), (0,), (0, 1))

    def plan(self, behind, remaining=None, supply=None):
        self.shape = self.SHAPES[(self.rounds + 1) % len(self.SHAPES)]
        return super().plan(behind, remaining, supply)


def test_sampling_stays_exact_when_the_chain_changes_shape_within_a_generation(bench_gguf, reference):
    prompt, distribution = reference
    paths = [bench_gguf[name] for name in ("target_bf16", "target_mxfp4", "draft_bf16")]
    with Pipeline.load(paths, n_ctx=256, draft_length=2) as pipeline:
        pipeline.policy = SwitchShapes(2, 3, pipeline.policy.confidence)
        counts, proposed = sample_counts(pipeline, prompt)
        stats = pipeline.generate(prompt, sampling=Sampling(temperature=TEMPERATURE, top_k=TOP_K, seed=1),
                                  max_tokens=LENGTH).finish().stats
    assert proposed > SAMPLES / 4 and stats.levels[1].proposed > 0
    assert chi_square_p_value(counts, distribution, SAMPLES) > 1e-3
