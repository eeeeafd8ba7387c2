"""Chat prompts reach the model with exactly one BOS where it wants one and none where it does not."""

import pytest

from assistant.engine import Model
from assistant.engine.chat_template import chat_prompt_tokens
from assistant.speculative import Pipeline, Stats
from converters import convert
from tests.fixtures.checkpoints import ARCHES, TOKENIZER_OF

MESSAGES = [{"role": "user", "content": "def add(a, b):"}]


@pytest.mark.parametrize("arch", ARCHES)
def test_one_bos_where_the_model_wants_one(tiny_checkpoint, tmp_path, arch):
    written = convert(tiny_checkpoint(arch), outdir=tmp_path, name="m", types=("bf16",), progress=False)
    with Model(written["bf16"]) as model:
        tokens = chat_prompt_tokens(model, MESSAGES)
        bos = model.bos_token
    if TOKENIZER_OF[arch] == "spm":  # Llama 2 style: the tokenizer adds BOS and the template writes one too
        assert tokens[0] == bos and tokens.count(bos) == 1, tokens[:4]
    else:  # ChatML (Qwen): no BOS in the template and none added
        assert bos not in tokens, tokens[:4]
    # and the pipeline's chat evaluates exactly these tokens
    with Pipeline.load([written["bf16"]], n_ctx=256, threads=1) as pipeline:
        stats = [event for event in pipeline.chat(MESSAGES, max_tokens=1) if isinstance(event, Stats)][0]
    assert stats.prompt_tokens == len(tokens)
