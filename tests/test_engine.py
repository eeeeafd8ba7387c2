"""The engine over real llama.cpp contexts: text round trips, chat template, KV rollback, bad files."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from assistant.cpu import STOCK_KERNELS
from assistant.engine import Context, Model, TextStream
from assistant.engine.chat_template import apply_chat_template
from assistant.engine.sequence import TokenSequence
from assistant.errors import AssistantError


@pytest.fixture(scope="module")
def target(bench_gguf):
    with Model(bench_gguf["target_bf16"]) as model:
        yield model


def test_tokenize_detokenize_round_trip_with_multibyte_text(target):
    text = 'def grüße(name):\n    return f"héllo {name} → 世界 🐍"\n'
    tokens = target.tokenize(text, add_special=False)
    assert len(tokens) > 5
    assert target.detokenize(tokens) == text


def test_text_stream_never_splits_a_character(target):
    text = "# 世界 🐍 ünïcödé\nprint('→')"
    tokens = target.tokenize(text, add_special=False)
    stream = TextStream(target)
    pieces = [stream.push(token) for token in tokens] + [stream.flush()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in piece for piece in pieces)
    # a byte-level vocabulary spends several tokens on the snake: some pieces must have been held back
    assert "" in pieces[:-1]


def test_chat_template_comes_from_the_gguf(target):
    prompt = apply_chat_template(target, [{"role": "user", "content": "Sort a list"}])
    template = target.chat_template
    assert template and "im_start" in template
    # the stored template adds its own default system message when the conversation has none
    assert prompt.startswith("<|im_start|>system\n")
    assert "<|im_start|>user\nSort a list<|im_end|>\n" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    tokens = target.tokenize(prompt)
    assert target.tokenize("<|im_start|>", add_special=False) == [tokens[0]]


def test_rolled_back_cache_gives_the_logits_of_a_fresh_one(target):
    prompt = target.tokenize("import numpy as np\n\ndef mean(values):\n", add_special=False)
    wrong_tail = target.tokenize("    raise SystemExit(1)", add_special=False)
    right_tail = target.tokenize("    return sum(values)", add_special=False)
    with Context(target, n_ctx=256, threads=1) as reused, Context(target, n_ctx=256, threads=1) as fresh:
        sequence = TokenSequence(prompt + wrong_tail)
        reused.evaluate(sequence, len(sequence) - 1)
        sequence.truncate(len(prompt))
        sequence.extend(right_tail)
        calls_before = reused.decode_calls
        rolled_back = np.array(reused.evaluate(sequence, len(prompt) - 1))
        assert reused.decode_calls == calls_before + 1  # only the new tail was evaluated, in one batch
        assert reused.tokens == prompt + right_tail
        reference = fresh.evaluate(TokenSequence(prompt + right_tail), len(prompt) - 1)
        assert rolled_back.shape == (len(right_tail) + 1, target.n_vocab)
        assert (rolled_back.argmax(axis=1) == reference.argmax(axis=1)).all()
        np.testing.assert_allclose(rolled_back, reference, atol=2e-2)


def test_evaluate_refuses_more_than_the_context(target):
    with Context(target, n_ctx=256, threads=1) as context:
        too_long = TokenSequence(list(range(100, 100 + context.n_ctx + 1)))
        with pytest.raises(AssistantError, match=f"context holds {context.n_ctx}"):
            context.evaluate(too_long, len(too_long) - 1)


def test_missing_and_non_gguf_files_are_named(tmp_path):
    with pytest.raises(AssistantError, match=r"nothere\.gguf: no such GGUF file"):
        Model(tmp_path / "nothere.gguf")
    fake = tmp_path / "fake.gguf"
    fake.write_text("not a model")
    with pytest.raises(AssistantError, match=r"fake\.gguf: not a GGUF file"):
        Model(fake)


def splits_that_differ(model_path: str) -> dict:
    """The target's context options here (pipeline.target_context_options), and which splits of a 12-token tail
    after a 520-token prompt give other logits than evaluating it token by token."""
    from assistant.speculative.pipeline import target_context_options

    options = target_context_options(model_path)
    with Model(model_path) as model:
        prompt = model.tokenize("def quicksort(values):\n    if len(values) <= 1:\n        return values\n" * 30,
                                add_special=False)
        tail = model.tokenize("    pivot = values[0]\n    left = [v for v in values[1:] if v < pivot]\n",
                              add_special=False)[:12]
        assert len(prompt) > 512 and len(tail) == 12

        def logits_after(chunks):
            """Rows for every tail position, evaluating the tail in chunks of the given sizes."""
            with Context(model, n_ctx=1024, threads=2, **options) as context:
                sequence = TokenSequence(prompt)
                rows = [np.array(context.evaluate(sequence, len(sequence) - 1)[-1])]
                for size in chunks:
                    start = len(sequence)
                    sequence.extend(tail[start - len(prompt) : start - len(prompt) + size])
                    rows.extend(np.array(context.evaluate(sequence, start)))
                return np.array(rows)

        stepwise = logits_after([1] * 12)
        splits = ([8, 4], [3, 9], [12], [2, 1, 5, 1, 3])
        return {"options": options, "differ": [chunks for chunks in splits if not (logits_after(chunks) == stepwise).all()]}


@pytest.mark.parametrize("kernels", ["ours", "stock"])
def test_target_evaluates_token_by_token_exactly_as_in_batches(bench_gguf, kernels):
    """Greedy losslessness rests on this: decoding one token at a time (as the target alone does) and
    verifying drafts in batches of any size (as speculation does) give the target bitwise the same logits,
    also past 512 tokens of context, where llama.cpp's own attention splits a lone query's keys over the
    threads. With our kernels: one row a step with our flash attention. With llama.cpp's stock kernels (a
    process of its own, as the kernel choice is made when ggml starts): two rows a step with the plain
    attention graph."""
    path = str(bench_gguf["target_bf16"])
    if kernels == "ours":
        found = splits_that_differ(path)
    else:
        stock = dict(STOCK_KERNELS)
        code = f"import json; from tests.test_engine import splits_that_differ; print(json.dumps(splits_that_differ({path!r})))"
        done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                              env=dict(os.environ, **stock), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        found = json.loads(done.stdout.splitlines()[-1])
    assert found["options"] == ({"min_batch": 1, "flash_attention": True} if kernels == "ours"
                                else {"min_batch": 2, "flash_attention": False})
    assert found["differ"] == []


def test_adopted_cache_gives_the_logits_of_evaluating_the_prompt(target, bench_gguf):
    """A context with the same attention geometry can take another's cache instead of evaluating it: the tail's
    logits are those of a context that evaluated the prompt itself, in the same batches (a prompt-sized batch
    rounds otherwise than a verification-sized one on some CPUs: native/src/bf16-gemm.cpp)."""
    prompt = target.tokenize("def mean(values):\n    return sum(values) / len(values)\n", add_special=False)
    tail = target.tokenize("\n\ndef median(values):\n", add_special=False)
    sequence = TokenSequence(prompt + tail)
    with Context(target, n_ctx=256, threads=1) as source, Context(target, n_ctx=256, threads=1) as adopter, \
            Context(target, n_ctx=256, threads=1) as fresh:
        source.evaluate(TokenSequence(prompt), len(prompt) - 1)
        assert adopter.adopt_cache(source)
        assert adopter.tokens == prompt
        calls_before = adopter.decode_calls
        adopted = np.array(adopter.evaluate(sequence, len(prompt)))
        assert adopter.decode_calls == calls_before + 1  # only the tail was evaluated
        fresh.evaluate(TokenSequence(prompt), len(prompt) - 1)
        assert np.array_equal(adopted, fresh.evaluate(sequence, len(prompt)))


def test_a_cache_of_another_geometry_is_refused(target, bench_gguf):
    with Model(bench_gguf["draft_bf16"]) as draft:
        assert draft.attention_geometry() != target.attention_geometry()
        prompt = target.tokenize("import os\n", add_special=False)
        with Context(target, n_ctx=256, threads=1) as source, Context(draft, n_ctx=256, threads=1) as other:
            source.evaluate(TokenSequence(prompt), len(prompt) - 1)
            assert not other.adopt_cache(source)
            assert other.tokens == []
    with Model(bench_gguf["target_mxfp4"]) as copy:
        assert copy.attention_geometry() == target.attention_geometry()


def test_choices_made_in_the_graph_are_the_argmax_of_the_shared_vocabulary(target):
    """``choose`` (the argmax computed by llama.cpp where the logits are) gives, row for row, the argmax the
    coordinator takes of ``evaluate``'s logits over the shared vocabulary; the same context switches back to
    logits for a sampled request."""
    from assistant.speculative.pipeline import target_context_options

    prompt = target.tokenize("def mean(values):\n    total = 0\n    for value in values:\n", add_special=False)
    draft = target.tokenize("        total += value\n    return total / len(values)\n", add_special=False)[:9]
    shared = 256  # a smaller vocabulary than the model's: the argmax must not look past it
    options = target_context_options()
    with Context(target, n_ctx=256, choices_for=shared, **options) as chooser, \
            Context(target, n_ctx=256, **options) as plain:
        assert chooser.chooses and not plain.chooses
        for context in (chooser, plain):  # every batch below then has the same size in both contexts
            context.evaluate(TokenSequence(prompt), len(prompt) - 1)
        limited = 0
        for size in (1, 4, 9):
            sequence = TokenSequence(prompt + draft[:size])
            rows = np.array(plain.evaluate(sequence, len(prompt) - 1))
            choices = chooser.choose(sequence, len(prompt) - 1)
            assert choices.tolist() == rows[:, :shared].argmax(axis=1).tolist()
            limited += int((rows.argmax(axis=1) != choices).sum())
            assert np.array_equal(chooser.evaluate(sequence, len(prompt) - 1), rows)
        assert limited  # some row's best token lies past the shared vocabulary
