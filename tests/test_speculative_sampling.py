"""Sampling is exact: sampled continuations of 2- and 3-level chains follow the target's own distribution
(chi-square goodness of fit against probabilities computed from the target's logits), every chain's answer for
a seed is the target alone's for that seed (at several temperatures, with top-k and top-p), and the same
goodness-of-fit test rejects a sampler whose noise has the wrong distribution."""

import math
from dataclasses import replace
from collections import Counter

import numpy as np
import pytest

from assistant.engine import Context
from assistant.engine.sequence import TokenSequence
from assistant.speculative import Pipeline, Sampling
from assistant.speculative.policy import ConstantLength
from assistant.speculative.probabilities import PositionNoise

PROMPT = "import os\nimport sys\nimport re\nimport"  # repetitive, so the n-gram drafter has material
TEMPERATURE, TOP_K, LENGTH = 1.5, 3, 3  # three tokens of three choices each: 27 outcomes
SAMPLES = 800


def processed(logits, temperature=TEMPERATURE, top_k=TOP_K, top_p=1.0):
    """Temperature, top-k, then top-p (the most likely tokens whose mass first reaches it), written
    independently of the coordinator's own sampler."""
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    keep = np.argsort(scaled)[::-1][: top_k or len(scaled)]
    weights = np.exp(scaled[keep] - scaled[keep].max())
    weights /= weights.sum()
    if top_p < 1.0:
        last = int(np.searchsorted(np.cumsum(weights), top_p))
        keep, weights = keep[: last + 1], weights[: last + 1] / weights[: last + 1].sum()
    return dict(zip(keep.tolist(), weights.tolist()))


def exact_distribution(model, prompt, length=LENGTH, **processing):
    """P(continuation) for every ``length``-token continuation, from the target's logits alone."""
    outcomes = {}
    with Context(model, n_ctx=256, threads=1) as context:
        def walk(prefix, probability):
            if len(prefix) == length:
                outcomes[tuple(prefix)] = probability
                return
            sequence = TokenSequence(prompt + prefix)
            choices = processed(context.evaluate(sequence, len(sequence) - 1)[0], **processing)
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


def sample_counts(pipeline, prompt_tokens, samples=SAMPLES, length=LENGTH, **processing):
    """Continuations per outcome over ``samples`` seeds, and how many tokens the lowest level proposed."""
    counts, proposed = Counter(), 0
    processing = processing or {"temperature": TEMPERATURE, "top_k": TOP_K}
    for seed in range(samples):
        sampling = Sampling(seed=seed, **processing)
        answer = pipeline.generate(prompt_tokens, sampling=sampling, max_tokens=length).finish()
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


def test_sampling_with_top_p_follows_the_target(bench_gguf):
    processing = {"temperature": 0.8, "top_k": 0, "top_p": 0.7}
    with Pipeline.load([bench_gguf["target_bf16"]], n_ctx=256) as target:
        prompt = target.tokenize(PROMPT)
        distribution = exact_distribution(target.target, prompt, length=2, **processing)
        counts, _ = sample_counts(target, prompt, length=2, **processing)
    assert len(distribution) > 4  # top-p really left a choice
    assert chi_square_p_value(counts, distribution, SAMPLES) > 1e-3


def uniform_noise(self, position):
    """A plausible bug: 1 / U for U uniform where 1 / E for E exponential belongs (the Gumbel's -log left out)."""
    generator = np.random.Generator(np.random.PCG64([self.seed, position]))
    return 1.0 / generator.random(self.n_vocab, dtype=np.float32).clip(1e-30)


def test_the_check_catches_noise_of_the_wrong_distribution(bench_gguf, reference, monkeypatch):
    prompt, distribution = reference
    monkeypatch.setattr(PositionNoise, "at", uniform_noise)
    with Pipeline.load([bench_gguf["target_bf16"]], n_ctx=256) as target:
        counts, _ = sample_counts(target, prompt)
    assert chi_square_p_value(counts, distribution, SAMPLES) < 1e-6


SETTINGS = [Sampling(0.3, 0, 1.0), Sampling(0.7, 0, 0.95), Sampling(1.0, 40, 1.0)]


@pytest.mark.parametrize("levels", ["target_bf16 draft_bf16", "target_bf16 target_mxfp4", "target_bf16 ngram",
                                    "target_bf16 target_mxfp4 draft_bf16 ngram"])
def test_every_chain_answers_a_seed_as_the_target_alone(bench_gguf, levels):
    """A seed's answer is the target's own sample: the same tokens from every chain shape, adaptive policy."""
    names = levels.split()
    paths = [bench_gguf[name] for name in names if name != "ngram"]
    prompt = PROMPT + " json\n\n\ndef load(path):\n"
    answers = {}
    with Pipeline.load([bench_gguf["target_bf16"]], n_ctx=512) as target:
        for setting in SETTINGS:
            for seed in range(4):
                sampling = replace(setting, seed=seed)
                answers[sampling] = target.generate(prompt, sampling, max_tokens=40).finish().tokens
    proposed = 0
    with Pipeline.load(paths, n_ctx=512, ngram="ngram" in names) as chain:
        for sampling, expected in answers.items():
            answer = chain.generate(prompt, sampling, max_tokens=40).finish()
            assert answer.tokens == expected, sampling
            proposed += sum(level.proposed for level in answer.stats.levels[1:])
    assert proposed > 0


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
