"""Speculative sampling with top-k from each row's top candidates (what a remote target sends back instead of
its rows of logits): the Sampler's distribution from a rebuilt row is bit for bit the one from the full row, and
a tie at the k-th value that reaches past the candidates fetches the row in full."""

import numpy as np
import pytest

from assistant.engine import Context, Model
from assistant.engine.sequence import TokenSequence
from assistant.speculative import Sampling
from assistant.speculative.candidates import SPARE, CandidateRows, candidate_count
from assistant.speculative.probabilities import Sampler

SAMPLINGS = [Sampling(0.7, 5, 1.0), Sampling(1.0, 40, 0.9), Sampling(1.3, 1, 1.0), Sampling(0.9, 3, 0.5)]


def distribution(sampler, logits) -> np.ndarray:
    return sampler.probabilities(logits, np.empty(sampler.n_vocab, dtype=np.float32)).copy()


def test_rows_rebuilt_from_the_devices_top_candidates_give_the_full_rows_distribution(bench_gguf):
    """A real context chooses each row's top candidates in its graph (over a shared vocabulary smaller than the
    model's); the Sampler's p from the rebuilt rows equals, bit for bit, its p from the full rows of another
    context, for several temperatures, top-k and top-p; the same context still gives logits and argmaxes."""
    from assistant.speculative.pipeline import target_context_options

    shared = 300
    options = target_context_options()
    with Model(bench_gguf["target_bf16"]) as model, \
            Context(model, n_ctx=256, choices_for=shared, **options) as chooser, \
            Context(model, n_ctx=256, **options) as plain:
        prompt = model.tokenize("def mean(values):\n    total = 0\n    for value in values:\n", add_special=False)
        draft = model.tokenize("        total += value\n    return total / len(values)\n", add_special=False)[:8]
        sequence = TokenSequence(prompt + draft)
        first = len(prompt) - 1
        for context in (chooser, plain):  # then every evaluation below is one verification-sized batch, as in a
            context.evaluate(TokenSequence(prompt), first)  # chain (a prompt-sized one may round otherwise)
        full = np.array(plain.evaluate(sequence, first))
        assert (full.argmax(axis=1) >= shared).any()  # the candidates must not look past the shared vocabulary
        for sampling in SAMPLINGS:
            sampler = Sampler(sampling, shared)
            rows = CandidateRows(chooser, sequence, first, sampler, np.empty(shared, dtype=np.float32))
            assert rows.ids.shape == (len(full), sampling.top_k + SPARE) and (rows.ids < shared).all()
            for j in range(len(full)):
                expected = distribution(sampler, full[j, :shared])
                assert np.array_equal(distribution(sampler, rows(j)), expected), (sampling, j)
                assert 0 < np.count_nonzero(expected) <= sampling.top_k
            assert rows.refetched == 0
        assert np.array_equal(chooser.choose(sequence, first), full[:, :shared].argmax(axis=1))
        assert np.array_equal(chooser.evaluate(sequence, first), full)


class GivenRows:
    """A context whose rows of logits are given, choosing candidates as the device does (the largest; among
    equal values, any)."""

    def __init__(self, rows: np.ndarray):
        self.rows = rows
        self.evaluations = 0

    def candidates(self, sequence, first_output: int, count: int):
        order = np.argsort(-self.rows, axis=1, kind="stable")[:, :count].astype(np.int32)
        return order, np.take_along_axis(self.rows, order, axis=1)

    def evaluate(self, sequence, first_output: int):
        self.evaluations += 1
        return self.rows


def scaling_tie(inverse_temperature: float) -> tuple[np.float32, np.float32]:
    """Two neighbouring float32 values, the larger first, that temperature scaling makes equal."""
    value = np.float32(1.9)
    for _ in range(1000):
        below = np.nextafter(value, np.float32(-np.inf))
        if below * inverse_temperature == value * inverse_temperature:
            return value, below
        value = below
    raise AssertionError("no tie made by scaling near 1.9")


def test_a_tie_at_the_kth_value_past_the_candidates_fetches_the_row_in_full():
    """Top-3 with SPARE more candidates: a row whose k-th value is shared by more tokens than the candidates
    hold, and one where temperature makes a smaller value equal to the k-th, each need tokens outside the
    candidates; those rows are fetched in full, and p is the full row's. A row without such a tie is not."""
    sampler = Sampler(Sampling(1.3, 3, 1.0), 100)
    count = candidate_count(sampler)
    rows = np.tile(np.linspace(-5, 0, 100, dtype=np.float32), (3, 1))  # row 0: all distinct
    rows[1, 10:13] = [9.0, 8.0, 7.0]
    rows[1, 20 : 20 + count] = 7.0  # the k-th value at more tokens than the candidates hold
    kth, below = scaling_tie(sampler.inverse_temperature)
    rows[2, 10:13] = [4.0, 3.0, kth]
    rows[2, 20 : 20 + count] = below  # smaller, but equal to the k-th once scaled
    for j, refetched in ((0, 0), (1, 1), (2, 1)):
        context = GivenRows(rows.copy())
        rebuilt = CandidateRows(context, None, 0, sampler, np.empty(100, dtype=np.float32))
        expected = distribution(sampler, rows[j])
        assert np.array_equal(distribution(sampler, rebuilt(j)), expected)
        assert (rebuilt.refetched, context.evaluations) == (refetched, refetched)
        if refetched:  # the candidates alone would have lost some of p's tokens
            assert np.count_nonzero(expected) > count
            alone = np.full(100, -np.inf, dtype=np.float32)
            alone[rebuilt.ids[j]] = rebuilt.logits[j]
            assert not np.array_equal(distribution(sampler, alone), expected)


@pytest.mark.parametrize("top_k, expected", [(0, 0), (3, 3 + SPARE), (98, 100)])
def test_no_top_k_asks_for_whole_rows_and_a_large_one_for_at_most_the_vocabulary(top_k, expected):
    assert candidate_count(Sampler(Sampling(1.0, top_k, 1.0), 100)) == expected
