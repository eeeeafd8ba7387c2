"""The second question about a long attached file does not evaluate the file again: the KV cache is kept
between chat turns and between `serve` requests, and each answer's Stats say how much of its prompt came
from it (``cached_tokens``) and when its first token came (``first_token_seconds``)."""

import pytest

from assistant.conversation import backend
from assistant.engine import Context
from assistant.engine.sequence import TokenSequence
from assistant.ui.widgets.status_line import StatusLine
from tests.fixtures.serve import ServerProcess
from tests.test_chat_app import SIZE, enter, make_app, saved_messages, settle

FILE_TOKENS = 2000


def long_code(tokenize, tokens: int = FILE_TOKENS) -> str:
    """Python source of about ``tokens`` tokens for the demo tokenizer."""
    text = "".join(f"value_{n} = {n} * {n} + {n % 7}\n" for n in range(tokens // 4))
    while len(tokenize(text)) > tokens:
        text = text[:text.rindex("value_")]
    return text


@pytest.fixture(scope="module")
def pipeline(bench_gguf):
    """The target and its MXFP4 copy, which may take the target's cache: a context large enough for the file."""
    from assistant.speculative import Pipeline

    pipeline = Pipeline.load([bench_gguf["target_bf16"], bench_gguf["target_mxfp4"]], n_ctx=4096, threads=1,
                             draft_length=4)
    yield pipeline
    pipeline.close()


@pytest.fixture
def copies(monkeypatch):
    """How many tokens each cache copy (adopt_cache) moved, in order."""
    moved = []
    adopt = Context.adopt_cache

    def counting(context, source):
        moved.append(len(source.tokens))
        return adopt(context, source)

    monkeypatch.setattr(Context, "adopt_cache", counting)
    return moved


def test_a_drafter_copies_the_targets_cache_only_when_it_lacks_much_of_the_prompt(pipeline, copies):
    assert pipeline.levels[1].shares_target_cache
    for level in pipeline.levels:
        level.context.reset()
    messages = [{"role": "user", "content": long_code(pipeline.tokenize) + "\nWhat is value_7?"}]
    first = pipeline.chat(messages, max_tokens=16).finish()
    prompt = first.stats.prompt_tokens
    assert first.stats.cached_tokens == 0 and copies == [prompt]  # a new prompt: taken from the target
    again = pipeline.chat(messages, max_tokens=16).finish()  # regenerated: every level holds the prompt already
    assert again.tokens == first.tokens and copies == [prompt], "the drafter evaluated a few tokens itself"
    assert prompt - 2 <= again.stats.cached_tokens < prompt  # the target's last tokens run again, for logits
    assert again.stats.prompt_seconds < first.stats.prompt_seconds / 4
    other = pipeline.chat([{"role": "user", "content": "def add(a, b):"}], max_tokens=4).finish()
    assert other.stats.cached_tokens < other.stats.prompt_tokens - 4 and len(copies) == 2  # copied again


def test_a_cache_taken_over_another_conversation_holds_nothing_of_it(bench_gguf):
    """Taking the target's cache replaces a longer one the drafter held: none of its cells stay behind."""
    from assistant.engine import Model

    with Model(bench_gguf["target_bf16"]) as target, Model(bench_gguf["target_mxfp4"]) as copy:
        prompt = target.tokenize(long_code(target.tokenize, 200), add_special=False)
        held = target.tokenize(long_code(target.tokenize, 400).upper(), add_special=False)
        sequence = TokenSequence(prompt + target.tokenize("total = value_1 + value_2\n", add_special=False))
        with Context(target, n_ctx=1024) as source, Context(copy, n_ctx=1024) as drafter, \
                Context(copy, n_ctx=1024) as empty:
            source.evaluate(TokenSequence(prompt), len(prompt) - 1)
            drafter.evaluate(TokenSequence(held), len(held) - 1)
            assert drafter.adopt_cache(source) and empty.adopt_cache(source) and drafter.tokens == prompt
            assert (drafter.evaluate(sequence, len(prompt)) == empty.evaluate(sequence, len(prompt))).all()


def test_the_context_fit_keeps_the_conversations_opening_until_it_must_cut_again(pipeline):
    """Turns are left out in steps, so the turns after a cut share their opening (and its cache)."""
    chat, kept = [], []
    paragraph = long_code(pipeline.tokenize, 300)
    for turn in range(24):
        chat.append({"role": "user", "content": f"Turn {turn}:\n{paragraph}"})
        messages = backend.fit_context(pipeline, backend.ChatPrompt("", list(chat), [[]] * len(chat), "."), 512)
        assert messages[-1] == chat[-1] and messages[0]["content"].startswith("Turn "), "a user's turn opens it"
        kept.append(int(messages[0]["content"].split(":")[0].split()[-1]))
        chat.append({"role": "assistant", "content": f"Answer {turn}."})
    cuts = [turn for turn in range(1, len(kept)) if kept[turn] != kept[turn - 1]]
    assert cuts and kept == sorted(kept), kept  # the conversation outgrew the context
    assert len(cuts) <= (len(kept) - cuts[0]) / 2, f"cut at nearly every turn: {kept}"


@pytest.fixture(scope="module")
def roomy_server(server_home):
    process = ServerProcess(server_home, "--ctx", "4096").wait_ready()
    yield process
    assert process.stop() == 0


def test_serve_keeps_the_cache_of_a_conversation_between_requests(roomy_server, pipeline):
    question = {"role": "user", "content": long_code(pipeline.tokenize) + "\nWhat is value_7?"}
    status, first = roomy_server.post("/v1/chat/completions", {"model": "demo", "messages": [question], "max_tokens": 24,
                                                         "temperature": 0})
    assert status == 200, first
    answer = first["choices"][0]["message"]["content"]
    assert first["usage"]["prompt_tokens"] > FILE_TOKENS - 50
    follow_up = [question, {"role": "assistant", "content": answer}, {"role": "user", "content": "And value_8?"}]
    status, second = roomy_server.post("/v1/chat/completions", {"model": "demo", "messages": follow_up, "max_tokens": 8,
                                                          "temperature": 0})
    assert status == 200, second
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    # the first prompt and the answer sent back verbatim (its last token the target had not evaluated yet)
    assert first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"] - 1 <= cached
    assert cached < second["usage"]["prompt_tokens"]
    assert second["speculation"]["prompt_seconds"] < first["speculation"]["prompt_seconds"] / 4
    status, other = roomy_server.post("/v1/chat/completions", {"model": "demo", "max_tokens": 4, "messages": [
        {"role": "user", "content": "def add(a, b):"}]})
    assert status == 200  # another conversation: only the chat template's opening (its system prompt) is shared
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] < other["usage"]["prompt_tokens"] - 4


@pytest.fixture
def anyio_backend():
    return "asyncio"  # Textual runs on asyncio


@pytest.mark.anyio
async def test_the_second_question_about_an_attached_file_starts_at_once(demo_set, tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_THREADS", "1")  # a thread that waits for a busy machine's other core is no measure
    app = make_app(cwd=tmp_path, n_ctx=4096)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        (tmp_path / "big.py").write_text(long_code(screen.loader.pipeline.tokenize))
        (tmp_path / "small.py").write_text("value_8 = 0\n")
        await enter(pilot, "What is value_7 in @big.py?")
        await settle(pilot)
        await enter(pilot, "And value_8, with @small.py?")  # a file attached later changes no earlier turn
        await settle(pilot)
        _, messages = saved_messages()
        assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
        first, second = messages[1].stats, messages[3].stats
        assert first["prompt_tokens"] > FILE_TOKENS and first["cached_tokens"] == 0
        assert first["prompt_tokens"] + first["new_tokens"] - 1 <= second["cached_tokens"] < second["prompt_tokens"]
        assert second["first_token_seconds"] < first["first_token_seconds"] / 10, (first, second)
        status = screen.query_one(StatusLine)
        assert status.context.endswith(f" · {second['cached_tokens']} cached") and "1st token" in status.speed
