"""The coordinator end to end over real contexts: greedy chains reproduce the target token for token,
and every way a generation ends (EOS, max tokens, stop string, cancel, context) is reported."""

import json
import threading

import pytest

from assistant.bench.workloads import DEFAULT_PROMPTS
from assistant.engine.chat_template import apply_chat_template
from assistant.errors import AssistantError
from assistant.speculative import LevelStats, Pipeline, Sampling, Stats, TokenEvent



def bench_prompts():
    return [json.loads(line) for line in DEFAULT_PROMPTS.read_text().splitlines() if line.strip()]


def run(pipeline, messages, **options):
    answer = pipeline.chat(messages, **options)
    tokens = list(answer)
    assert all(isinstance(event, TokenEvent) for event in tokens)
    assert isinstance(answer.stats, Stats)
    assert answer.tokens == [event.token for event in tokens] and answer.levels == [event.level for event in tokens]
    assert answer.text == "".join(event.text for event in tokens) and list(answer) == []  # it ran out once
    return [event.token for event in tokens], answer.stats, tokens


def chains(gguf, every=True):
    t, m, d = gguf["target_bf16"], gguf["target_mxfp4"], gguf["draft_bf16"]
    quick = {"3-level": ([t, m, d], {}), "3-level constant 8": ([t, m, d], {"draft_length": 8}),
             "2-level + ngram": ([t, d], {"ngram": True})}
    return {"2-level mxfp4": ([t, m], {}), "2-level draft": ([t, d], {}), **quick} if every else quick


def count_differing(gguf, prompts, max_tokens=128, every=True):
    """Prompts whose greedy output differs from the target alone, per chain."""
    reference = Pipeline.load([gguf["target_bf16"]], n_ctx=2048)
    expected = [run(reference, prompt["messages"], max_tokens=max_tokens)[0] for prompt in prompts]
    reference.close()
    differing = {}
    for name, (paths, options) in chains(gguf, every).items():
        with Pipeline.load(paths, n_ctx=2048, **options) as pipeline:
            outputs = [run(pipeline, prompt["messages"], max_tokens=max_tokens) for prompt in prompts]
        differing[name] = [p["id"] for p, want, (got, _, _) in zip(prompts, expected, outputs) if got != want]
        assert any(stats.levels[1].proposed for _, stats, _ in outputs), name
    return differing


def test_greedy_chains_match_the_target_on_three_bench_prompts(bench_gguf):
    prompts = bench_prompts()[::20][:3]
    assert count_differing(bench_gguf, prompts, every=False) == {name: [] for name in chains(bench_gguf, False)}


@pytest.mark.slow
def test_greedy_chains_match_the_target_on_every_bench_prompt(bench_gguf):
    differing = count_differing(bench_gguf, bench_prompts())
    print({name: len(ids) for name, ids in differing.items()})
    assert differing == {name: [] for name in chains(bench_gguf)}


def test_events_carry_provenance_and_stats_add_up(three_level_pipeline):
    prompt = bench_prompts()[1]["messages"]
    tokens, stats, events = run(three_level_pipeline, prompt, max_tokens=48)
    assert stats.new_tokens == len(tokens) and stats.stop_reason in ("max_tokens", "eos")
    assert {event.level for event in events} <= {0, 1, 2}
    assert any(event.level == 2 for event in events)  # the small draft got tokens through both verifiers
    assert [level.role for level in stats.levels] == three_level_pipeline.roles == ["target", "draft1", "draft2"]
    for level in stats.levels[1:]:
        assert isinstance(level, LevelStats)
        assert 0 < level.accepted <= level.proposed
        assert level.acceptance == pytest.approx(level.accepted / level.proposed)
        assert level.mean_accepted_length >= 1.0
    assert 0 < sum(level.seconds for level in stats.levels) <= stats.seconds
    assert stats.tokens_per_second == pytest.approx(stats.new_tokens / stats.seconds)
    assert stats.prompt_tokens == len(three_level_pipeline.tokenize(apply_chat_template(three_level_pipeline.target, prompt)))
    text = "".join(event.text for event in events)
    assert text == three_level_pipeline.detokenize(tokens)


def test_stop_string_ends_the_answer_before_it(three_level_pipeline, target_pipeline):
    prompt = bench_prompts()[2]["messages"]
    tokens, _, events = run(target_pipeline, prompt, max_tokens=64)
    full = "".join(event.text for event in events)
    stop = full[20:24]  # some text from inside the greedy answer
    assert stop.strip()
    _, stats, events = run(three_level_pipeline, prompt, max_tokens=64, stop=[stop, "never-there"])
    assert stats.stop_reason == "stop"
    assert "".join(event.text for event in events) == full[: full.index(stop)]


def test_eos_ends_the_answer(three_level_pipeline, target_pipeline):
    prompt = next(p for p in bench_prompts() if p["id"] == "dev008")["messages"]  # the bench target answers it briefly
    expected, alone, _ = run(target_pipeline, prompt, max_tokens=200)
    tokens, stats, _ = run(three_level_pipeline, prompt, max_tokens=200)
    assert alone.stop_reason == stats.stop_reason == "eos"
    assert tokens == expected and len(tokens) < 200


def test_cancel_stops_at_a_token_boundary(three_level_pipeline):
    cancel = threading.Event()
    events = []
    answer = three_level_pipeline.chat(bench_prompts()[3]["messages"], max_tokens=100, cancel=cancel)
    for event in answer:
        events.append(event)
        if len(events) == 5:
            cancel.set()
    assert answer.stats.stop_reason == "cancelled"
    assert answer.stats.new_tokens == 5 and len(events) == 5


def test_context_limit_ends_the_answer(bench_gguf):
    """A prompt that leaves room for 10 tokens: the answer stops at the context's end, drafts and all."""
    with Pipeline.load([bench_gguf["target_bf16"], bench_gguf["draft_bf16"]], n_ctx=256, draft_length=8) as pipeline:
        prompt = pipeline.tokenize("def main():\n" * 80)[:246]
        stats = pipeline.generate(prompt, max_tokens=1000).finish().stats
        assert stats.stop_reason == "context", stats
        assert len(prompt) + stats.new_tokens == 256
        assert pipeline.context_used <= 256


def test_prompt_longer_than_the_context_is_refused(bench_gguf):
    with Pipeline.load([bench_gguf["target_bf16"]], n_ctx=256) as pipeline:
        with pytest.raises(AssistantError, match=r"prompt has \d+ tokens but the context holds 256"):
            pipeline.generate("x = 1\n" * 300)


def test_max_tokens_and_greedy_sampling_object(three_level_pipeline):
    tokens, stats, _ = run(three_level_pipeline, bench_prompts()[4]["messages"], max_tokens=7,
                           sampling=Sampling(temperature=0.0))
    assert len(tokens) == 7 and stats.stop_reason == "max_tokens"


def test_the_adaptive_chain_leaves_out_a_draft_that_never_agrees(bench_gguf, useless_draft_gguf, target_pipeline):
    """Random weights under the target's tokenizer: the policy measures the draft once, stops asking it,
    and says so in the stats (rounds per chain shape, the predicted seconds per token of every candidate)."""
    prompts = [prompt["messages"] for prompt in bench_prompts()[:2]]
    expected = [run(target_pipeline, messages, max_tokens=64)[0] for messages in prompts]
    paths = [bench_gguf["target_bf16"], bench_gguf["target_mxfp4"], useless_draft_gguf]
    with Pipeline.load(paths, n_ctx=1024, threads=1) as pipeline:
        assert pipeline.roles == ["target", "draft1", "draft2", "ngram"]
        results = [run(pipeline, messages, max_tokens=64) for messages in prompts]
    assert [tokens for tokens, _, _ in results] == expected
    stats = results[1][1]
    with_draft = sum(rounds for shape, rounds in stats.shapes.items() if "draft2" in shape)
    assert with_draft <= 3 < sum(stats.shapes.values()), stats.shapes
    assert len(stats.predicted) == 8 and "target" in stats.predicted
    assert stats.levels[2].proposed <= 3 * 15


def test_the_n_gram_level_joins_adaptive_chains_of_models_only(bench_gguf):
    """"Speculation off" (the target alone) must stay plain decoding; a fixed length keeps the chain as given."""
    target, draft = bench_gguf["target_bf16"], bench_gguf["draft_bf16"]
    with Pipeline.load([target], n_ctx=256, threads=1) as alone:
        assert alone.roles == ["target"]
    with Pipeline.load([target, draft], n_ctx=256, threads=1) as adaptive:
        assert adaptive.roles == ["target", "draft1", "ngram"]
    with Pipeline.load([target, draft], n_ctx=256, threads=1, draft_length=4) as fixed:
        assert fixed.roles == ["target", "draft1"]
    with Pipeline.load([target], n_ctx=256, threads=1, ngram=True) as asked:
        assert asked.roles == ["target", "ngram"]
