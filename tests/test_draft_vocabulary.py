"""Drafts with a vocabulary of their own (drafts/vocabulary.py): the file llama.cpp loads, the ids the context maps
in and out, and a chain over such a draft answering exactly as the target alone, greedy and sampled."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from assistant.drafts.vocabulary import common_tokens, kept_tokens, trimmed
from assistant.engine import Context, Model
from assistant.engine.sequence import TokenSequence
from assistant.errors import AssistantError
from assistant.speculative import Pipeline, Sampling

TEXT = "def merge(left, right):\n    result = []\n    while left and right:\n        result.append(left.pop(0))\n"
SIZE = 1024


@pytest.fixture(scope="module")
def trimmed_draft(demo_gguf, tmp_path_factory):
    """(target, the kept target ids, the draft's path, the ids of TEXT)."""
    target = demo_gguf["target_bf16"]
    with Model(target, vocab_only=True) as model:
        used = model.tokenize(TEXT, add_special=False)
    kept = kept_tokens(target, common_tokens(target), SIZE, extra=used)
    return target, kept, trimmed(target, kept, tmp_path_factory.mktemp("vocab") / "target.vocab.gguf"), used


def test_the_draft_keeps_the_text_the_markers_and_the_commonest_tokens(trimmed_draft):
    target, kept, path, used = trimmed_draft
    reader = gguf.GGUFReader(target)
    types = np.asarray(reader.fields[gguf.Keys.Tokenizer.TOKEN_TYPE].contents())
    markers = np.flatnonzero(types != int(gguf.TokenType.NORMAL))
    assert set(used) <= set(kept.tolist()) and set(markers.tolist()) <= set(kept.tolist())
    assert len(kept) + 1 == -(-max(SIZE, len(set(used) | set(markers.tolist())) + 1) // 64) * 64  # with the stand-in
    with Model(target, vocab_only=True) as model:  # counted on Python's own source: its keywords come first
        assert set(model.tokenize(" return self", add_special=False)) <= set(common_tokens(target)[:256].tolist())
    with Model(path) as draft, Model(target, vocab_only=True) as whole:
        assert draft.n_vocab == whole.n_vocab and draft.n_own_vocab == len(kept) + 1
        assert draft.target_ids.tolist() == kept.tolist() + [-1]
        assert all(draft.token_text(own) == whole.token_text(int(token)) for own, token in enumerate(kept))


def test_its_logits_are_the_targets_over_the_tokens_it_keeps(trimmed_draft):
    target, kept, path, used = trimmed_draft
    with Model(target) as whole, Model(path) as draft:
        whole_context, draft_context = Context(whole, n_ctx=128), Context(draft, n_ctx=128)  # views live with them
        full = whole_context.evaluate(TokenSequence(used), 0)
        own = draft_context.evaluate(TokenSequence(used), 0)
        assert own.shape == full.shape
        assert np.isneginf(np.delete(own, kept, axis=1)).all()
        np.testing.assert_allclose(own[:, kept], full[:, kept], rtol=0, atol=1e-2 * np.abs(full).max())
        lacking = [int(token) for token in np.setdiff1d(np.arange(whole.n_vocab), kept)[:5]]
        rows = draft_context.evaluate(TokenSequence(used + lacking), 0)  # fed as the stand-in
        assert np.isin(rows.argmax(axis=1), kept).all()


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(0.7, 0, 0.95, seed=3), Sampling(1.0, 40, 1.0, seed=5)])
def test_a_chain_over_it_answers_as_the_target_alone(trimmed_draft, sampling):
    target, _, path, _ = trimmed_draft
    with Pipeline.load([target], n_ctx=512) as alone:
        expected = alone.generate(TEXT, sampling, max_tokens=48).finish().tokens
    with Pipeline.load([target, path], n_ctx=512, draft_length=4) as chain:
        answer = chain.generate(TEXT, sampling, max_tokens=48).finish()
    assert answer.tokens == expected
    assert answer.stats.levels[1].proposed > 0 and answer.stats.levels[1].accepted > 0


def test_a_draft_cut_from_another_vocabulary_is_refused(trimmed_draft, imported_smollm2):
    _, _, path, _ = trimmed_draft
    with pytest.raises(AssistantError, match="vocabulary was cut from one of 8192 tokens"):
        Pipeline.load([imported_smollm2["bf16"], path], n_ctx=256)
