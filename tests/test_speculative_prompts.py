"""Deferred prompts over real contexts: a drafter evaluates the prompt only when a round first plans it, so
one the policy leaves out never evaluates it, one that joins later catches up first, and answers stay the
target's own."""

import json

import pytest

from assistant.bench.workloads import DEFAULT_PROMPTS
from assistant.speculative import Pipeline
from assistant.speculative.policy import ConstantLength


def bench_messages(index: int) -> list[dict]:
    return json.loads(DEFAULT_PROMPTS.read_text().splitlines()[index])["messages"]


class Shapes(ConstantLength):
    """A fixed pipeline whose rounds take ``shapes`` in turn (the last one repeated), each drafting 4 tokens;
    keeps every round's record."""

    def __init__(self, n_levels: int, shapes: list[tuple]):
        super().__init__(4, n_levels, shape=shapes[0])
        self.shapes = shapes
        self.records = []

    def plan(self, behind, remaining=None, supply=None):
        self.shape = self.shapes[min(self.rounds, len(self.shapes) - 1)]
        return super().plan(behind, remaining, supply)

    def record(self, record) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def expected(target_pipeline):
    return [target_pipeline.chat(bench_messages(index), max_tokens=48).finish().tokens for index in range(2)]


def test_a_drafter_never_planned_never_evaluates_the_prompt(bench_gguf, expected):
    """The target verifying the n-gram level's proposals only: the small draft below it holds a context but
    never decodes a token, over two answers."""
    with Pipeline.load([bench_gguf["target_bf16"], bench_gguf["draft_bf16"]], n_ctx=1024, threads=1,
                       ngram=True) as pipeline:
        pipeline.policy = Shapes(3, [(0, 2)])
        answers = [pipeline.chat(bench_messages(index), max_tokens=48).finish() for index in range(2)]
        draft = pipeline.levels[1].context
        assert draft.decode_calls == 0 and draft.decode_seconds == 0.0 and draft.tokens == []
    assert [answer.tokens for answer in answers] == expected
    assert all(answer.stats.levels[1].seconds == 0.0 for answer in answers)


def test_a_middle_level_planned_late_catches_up_on_the_prompt_in_a_batch_of_its_own(bench_gguf, expected):
    """Target <- small draft for three rounds, then target <- MXFP4 copy <- small draft from a remote-like start
    (the copy may not take the target's cache): the copy's first round evaluates the prompt and the rounds it
    missed as one batch apart from its verification, then verifies as usual; the answer is the target's."""
    paths = [bench_gguf["target_bf16"], bench_gguf["target_mxfp4"], bench_gguf["draft_bf16"]]
    with Pipeline.load(paths, n_ctx=1024, threads=1, draft_length=4) as pipeline:
        pipeline.levels[1].shares_target_cache = False  # as under a remote target
        policy = pipeline.policy = Shapes(3, [(0, 2)] * 3 + [(0, 1, 2)])
        answer = pipeline.chat(bench_messages(0), max_tokens=48).finish()
    assert answer.tokens == expected[0]
    prompt = answer.stats.prompt_tokens
    joined = policy.records[3].batches
    catch_up = [batch for batch in joined if batch.level == 1 and batch.drafter is None]
    assert len(catch_up) == 1 and catch_up[0].size > prompt and joined.index(catch_up[0]) == 0
    assert all(batch.size <= 5 for batch in joined if batch.level == 1 and batch.drafter is not None)
    assert all(batch.level != 1 for record in policy.records[:3] for batch in record.batches)
    assert answer.stats.levels[1].proposed > 0


def test_an_adaptive_chain_still_runs_a_drafter_that_repays_its_prompt(bench_gguf, target_pipeline):
    """The trained small draft pays on these prompts (where the n-gram level has nothing to copy): on a second
    answer, whose prompt it has not evaluated, the policy still plans it, it catches up, and the answer is the
    target's."""
    messages = [bench_messages(index) for index in (0, 1)]
    expected = [target_pipeline.chat(m, max_tokens=96).finish().tokens for m in messages]
    with Pipeline.load([bench_gguf["target_bf16"], bench_gguf["draft_bf16"]], n_ctx=1024, threads=1) as pipeline:
        assert pipeline.policy.upfront == (0,)
        answers = [pipeline.chat(m, max_tokens=96).finish() for m in messages]
        draft = pipeline.levels[1].context
        prompt = answers[1].stats.prompt_tokens
        assert len(draft.tokens) >= prompt  # it evaluated the second prompt, in a round that planned it
    assert [answer.tokens for answer in answers] == expected
    second = answers[1].stats
    assert any("draft1" in shape for shape in second.shapes) and second.levels[1].proposed > 0


def test_the_ngram_level_is_judged_in_rounds_it_sits_out(bench_gguf, expected):
    """Target <- small draft only: each round still records how much of the n-gram level's proposal at its start
    the target's tokens kept (the prefix they share), so the policy's view of that pair follows the text."""
    from assistant.engine.sequence import TokenSequence
    from assistant.speculative.levels import NgramLevel

    with Pipeline.load([bench_gguf["target_bf16"], bench_gguf["draft_bf16"]], n_ctx=1024, threads=1,
                       ngram=True) as pipeline:
        policy = pipeline.policy = Shapes(3, [(0, 1)])
        answer = pipeline.chat(bench_messages(0), max_tokens=48).finish()
    assert answer.tokens == expected[0]
    prompt = list(pipeline.chain.sequence.tokens[: answer.stats.prompt_tokens])
    lookup, position, seen = NgramLevel(), 0, []
    for record in policy.records:
        made = sum(batch.accepted + 1 for batch in record.batches if batch.level == 0)
        proposal = lookup.propose(TokenSequence(prompt + answer.tokens[:position]), 4)
        kept = answer.tokens[position : position + made]
        judged = min(len(proposal), len(kept))
        accepted = next((j for j in range(judged) if proposal[j] != kept[j]), judged)
        assert [(h.drafter, h.accepted, h.judged) for h in record.hindsight] == (
            [(2, accepted, accepted + (accepted < judged))] if judged else [])
        seen.append(accepted)
        position += made
    assert position == len(answer.tokens) and any(seen)


def test_a_rounds_ngram_lookup_is_made_once(bench_gguf, expected):
    """Target <- n-gram level: the proposal the policy was told of before the round is the one the target
    verifies, looked up once a round; the answer is the target's."""
    with Pipeline.load([bench_gguf["target_bf16"]], n_ctx=1024, threads=1, ngram=True) as pipeline:
        policy = pipeline.policy = Shapes(2, [(0, 1)])
        level = pipeline.levels[1]
        lookups = []
        propose = level.propose
        level.propose = lambda sequence, count: lookups.append(propose(sequence, count)) or lookups[-1]
        answer = pipeline.chat(bench_messages(0), max_tokens=48).finish()
    assert answer.tokens == expected[0]
    assert len(lookups) == len(policy.records)
    made, wanted = 0, []
    for record, proposal in zip(policy.records, lookups):
        (batch,) = [batch for batch in record.batches if batch.level == 0]
        wanted.append(min(len(proposal), 4, 48 - made - 1))  # the last rounds ask only what the limit leaves
        made += batch.accepted + 1
    drafted = [batch.drafted for record in policy.records for batch in record.batches if batch.level == 0]
    assert drafted == wanted and any(drafted)
