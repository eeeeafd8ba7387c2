"""The engine over real llama.cpp contexts: text round trips, chat template, KV rollback, bad files."""

import numpy as np
import pytest

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


def test_min_batch_two_makes_token_by_token_equal_to_batched_bitwise(bench_gguf):
    """Greedy losslessness rests on this: decoding one token at a time (as the target alone does) and
    verifying a batch (as speculation does) must give the target bitwise the same logits."""
    with Model(bench_gguf["target_bf16"]) as model:
        prompt = model.tokenize("def quicksort(values):\n    if len(values) <= 1:\n", add_special=False)
        tail = model.tokenize("        return values\n    pivot = values[0]\n", add_special=False)[:8]
        with Context(model, n_ctx=256, min_batch=2) as stepwise, Context(model, n_ctx=256, min_batch=2) as batched:
            sequence = TokenSequence(prompt)
            rows = [np.array(stepwise.evaluate(sequence, len(sequence) - 1)[0])]
            for token in tail:
                sequence.append(token)
                rows.append(np.array(stepwise.evaluate(sequence, len(sequence) - 1)[0]))
            batched.evaluate(TokenSequence(prompt[:-1]), len(prompt) - 2)
            reference = batched.evaluate(TokenSequence(prompt + tail), len(prompt) - 1)
            assert (np.array(rows) == reference).all()
