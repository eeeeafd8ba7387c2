"""`assistant convert` end to end: tiny random checkpoints of every architecture converted to GGUF, loaded
by llama.cpp, and compared with transformers (tokens, logits), with gguf-py's MXFP4 reference quantizer
(bytes) and with GGUFReader (round trip); the demo pair converts and its chat template renders."""

from __future__ import annotations

import ctypes

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from assistant import modelsets
from assistant.cli import main
from assistant.engine import backend
from converters import convert
from converters.architectures import permute_for_rope
from converters.safetensors_file import SafetensorsFile

llama_cpp = pytest.importorskip("llama_cpp")

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "class Counter:\n\tdef __init__(self):\n\t\tself.count = 0  # four  spaces\n",
    "héllo wörld ☃ 日本語 🎉 naïve café",
    "12345 67890 3.14159 1e-10 0x1F",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<s>Hello</s> world",
    "   leading spaces and trailing   ",
    "x=1;y=2\n\n\nz",
]
PROMPT = "def add(a, b):\n    return a + b\n\nclass Counter:\n    pass\n"
# (arch, tied, bias, config overrides): every architecture, tied and untied, with and without biases,
# GQA everywhere (4 heads, 2 KV heads), rope theta and scaling as configs give them
CASES = [
    ("qwen2", False, True, {}),
    ("qwen2", True, True, {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    ("qwen3", False, False, {}),
    ("qwen3", True, False, {"rope_theta": 1000000.0}),
    ("llama", False, True, {}),
    ("llama", True, False, {"rope_theta": 500000.0, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}}),
    ("mistral", False, False, {}),
    ("mistral", True, False, {"rope_theta": 1000000.0}),
]
IDS = [f"{a}-{'tied' if t else 'untied'}-{'bias' if b else 'nobias'}{'-' + '-'.join(o) if o else ''}" for a, t, b, o in CASES]


def load(path, **kwargs):
    backend.llama()  # the portable build's backends are modules, loaded from llama_cpp/lib first
    return llama_cpp.Llama(str(path), n_threads=1, n_ctx=256, verbose=False, **kwargs)


def detokenize(model, tokens: list[int]) -> str:
    """llama.cpp's own detokenizer (the Llama class's joins pieces and keeps SentencePiece's leading space)."""
    vocab = llama_cpp.llama_model_get_vocab(model._model.model)
    array = (llama_cpp.llama_token * len(tokens))(*tokens)
    buffer = ctypes.create_string_buffer(4096)
    n = llama_cpp.llama_detokenize(vocab, array, len(tokens), buffer, len(buffer), False, True)
    return buffer.raw[:n].decode()


@pytest.fixture(scope="module")
def hf():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return torch, transformers


@pytest.mark.parametrize("arch,tied,bias,overrides", CASES, ids=IDS)
def test_tokens_and_logits_match_transformers(tiny_checkpoint, tmp_path, hf, arch, tied, bias, overrides):
    torch, transformers = hf
    checkpoint = tiny_checkpoint(arch, tied=tied, bias=bias, **overrides)
    written = convert(checkpoint, outdir=tmp_path, name="m", types=("bf16",), progress=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = load(written["bf16"], logits_all=True)
    for text in TEXTS:
        expected = tokenizer.encode(text, add_special_tokens=False)
        assert model.tokenize(text.encode(), add_bos=False, special=True) == expected, text
        assert detokenize(model, expected) == tokenizer.decode(expected), text

    tokens = tokenizer.encode(PROMPT, add_special_tokens=False)[:48]
    reference = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    with torch.no_grad():
        expected = reference(torch.tensor([tokens])).logits[0].numpy()
    model.eval(tokens)
    got = np.array(model.scores[: len(tokens)])
    diff = np.abs(got - expected).max()
    # BF16 weights are exact in both; llama.cpp rounds activations to BF16 inside its matmuls (2^-8
    # relative), which over two layers gives ~0.01-0.03 on logits of magnitude ~3 (measured max 0.027).
    assert diff < 0.06, f"max abs logit diff {diff:.4f}"
    assert (got.argmax(-1) == expected.argmax(-1)).mean() > 0.9


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_mxfp4_bytes_equal_ggml_reference_and_files_round_trip(tiny_checkpoint, tmp_path, arch):
    checkpoint = tiny_checkpoint(arch, bias=arch == "llama", intermediate_size=80)
    written = convert(checkpoint, outdir=tmp_path, name="m", types=("bf16", "mxfp4", "q8_0", "f16"),
                      progress=False)
    source = SafetensorsFile(checkpoint / "model.safetensors")
    heads = {"attn_q": 4, "attn_k": 2}

    def source_of(gguf_name: str) -> np.ndarray:
        """The HF tensor a GGUF tensor came from, as float32, in ggml's row order."""
        block, kind = gguf_name.split(".")[1:3] if gguf_name.startswith("blk.") else (None, gguf_name.split(".")[0])
        hf_names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
                    "ffn_norm": "post_attention_layernorm", "attn_q_norm": "self_attn.q_norm",
                    "attn_k_norm": "self_attn.k_norm", "token_embd": "model.embed_tokens",
                    "output_norm": "model.norm", "output": "lm_head"}
        suffix = gguf_name.rsplit(".", 1)[1]
        name = f"model.layers.{block}.{hf_names[kind]}.{suffix}" if block else f"{hf_names[kind]}.{suffix}"
        bits = np.array(source.array(source.entries[name]))
        values = (bits.astype(np.uint32) << 16).view(np.float32)
        if arch == "llama" and kind in heads:
            values = permute_for_rope(values, heads[kind])
        return values

    for kind, path in written.items():
        reader = gguf.GGUFReader(path)
        assert reader.fields["general.architecture"].contents() == {"llama": "llama", "qwen3": "qwen3"}[arch]
        assert reader.fields["tokenizer.ggml.model"].contents() in ("llama", "gpt2")
        names = [t.name for t in reader.tensors]
        per_layer = 11 if arch == "qwen3" else 9 + 4  # llama: + q/k/v/o biases
        assert len(names) == len(set(names)) == 3 + 2 * per_layer  # + embeddings, output norm, head
        for tensor in reader.tensors:
            values = source_of(tensor.name)
            assert tuple(int(n) for n in reversed(tensor.shape)) == values.shape
            data = np.asarray(tensor.data)
            if values.ndim == 1:
                assert tensor.tensor_type == Q.F32 and np.array_equal(data, values)
            elif kind in ("mxfp4", "q8_0") and tensor.name.endswith("ffn_down.weight"):
                assert tensor.tensor_type == Q.BF16  # 80-long rows are not a multiple of 32: fallback
            elif kind in ("mxfp4", "q8_0"):
                assert tensor.tensor_type == Q[kind.upper()]
                reference = gguf.quants.quantize(values, tensor.tensor_type)
                assert np.array_equal(data.reshape(reference.shape), reference), tensor.name
            else:
                assert tensor.tensor_type == Q[kind.upper()]
                decoded = data.view(np.uint16).astype(np.uint32) << 16 if kind == "bf16" else data
                expected = values if kind == "bf16" else values.astype(np.float16)
                assert np.array_equal(np.asarray(decoded).view(expected.dtype).reshape(expected.shape), expected)
        load(path).tokenize(b"hello")  # llama.cpp accepts every file
    source.close()


def test_mxfp4_output_override(tiny_checkpoint, tmp_path):
    written = convert(tiny_checkpoint("qwen2"), outdir=tmp_path, name="m", types=("mxfp4",), progress=False,
                      mxfp4_output="bf16")
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(written["mxfp4"]).tensors}
    assert types["token_embd.weight"] == types["output.weight"] == Q.BF16
    assert types["blk.0.attn_q.weight"] == Q.MXFP4


def test_demo_pair_converts_generates_and_renders_chat_template(demo_gguf):
    target = load(demo_gguf["target_bf16"], logits_all=True)
    prompt = target.tokenize(b"def fibonacci(n):\n", add_bos=False)
    out = target(b"def fibonacci(n):\n".decode(), max_tokens=24, temperature=0.0)["choices"][0]["text"]
    assert out.strip(), out

    # the MXFP4 copy is a good draft: its greedy choice agrees with the target's on most positions
    tokens = prompt + target.tokenize(out.encode(), add_bos=False)
    target.reset()
    target.eval(tokens)
    draft = load(demo_gguf["target_mxfp4"], logits_all=True)
    draft.eval(tokens)
    agree = (np.array(target.scores[: len(tokens)]).argmax(-1) == np.array(draft.scores[: len(tokens)]).argmax(-1))
    assert agree.mean() > 0.6, agree.mean()

    for role in ("target", "draft"):
        model = load(demo_gguf[f"{role}_bf16"], vocab_only=True)
        template = model.metadata["tokenizer.chat_template"]
        assert "<|im_start|>" in template
        messages = [("system", "Be brief."), ("user", "Write hello world in Python.")]
        chat = (llama_cpp.llama_chat_message * len(messages))(
            *[llama_cpp.llama_chat_message(role.encode(), content.encode()) for role, content in messages]
        )
        buffer = ctypes.create_string_buffer(4096)
        n = llama_cpp.llama_chat_apply_template(template.encode(), chat, len(messages), True, buffer, len(buffer))
        assert buffer.raw[:n].decode() == (
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWrite hello world in Python.<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
        assert model.token_eos() == model.tokenize(b"<|im_end|>", add_bos=False, special=True)[0]


def test_cli_converts_and_registers_model_set(tiny_checkpoint, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    assert main(["convert", str(checkpoint / "model.safetensors"), "--name", "tiny"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 2 and "tiny.bf16.gguf" in out[0] and "registered model set 'tiny'" in out[0]
    assert "`assistant draft tiny` makes one" in out[1]  # a set with no small draft is told it can have one
    model_set = modelsets.get("tiny")
    assert [level.role for level in model_set.levels] == ["target", "mxfp4"]
    assert [level.path.name for level in model_set.levels] == ["tiny.bf16.gguf", "tiny.mxfp4.gguf"]
    assert not model_set.missing_files()

    assert main(["convert", str(checkpoint), "--name", "solo", "--types", "mxfp4"]) == 0
    assert [level.role for level in modelsets.get("solo").levels] == ["target"]


def test_sharded_checkpoint_converts_like_a_single_file(tiny_checkpoint, tmp_path):
    """A checkpoint split into shards with a model.safetensors.index.json gives the same GGUF tensors."""
    import json

    from converters.random_checkpoint import write_bf16_tensors

    checkpoint = tiny_checkpoint("llama")
    single = convert(checkpoint, outdir=tmp_path / "single", name="m", types=("mxfp4",), progress=False)["mxfp4"]
    source = SafetensorsFile(checkpoint / "model.safetensors")
    names = list(source.entries)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2 :]}
    for shard, members in shards.items():
        write_bf16_tensors(checkpoint / shard, [(n, source.entries[n].shape) for n in members],
                          lambda name, shape: np.array(source.array(source.entries[name])))
    source.close()
    (checkpoint / "model.safetensors").unlink()
    weight_map = {name: shard for shard, members in shards.items() for name in members}
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    sharded = convert(checkpoint / "model-00002-of-00002.safetensors", outdir=tmp_path / "sharded", name="m",
                      types=("mxfp4",), progress=False)["mxfp4"]
    expected = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(single).tensors}
    got = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(sharded).tensors}
    assert sorted(got) == sorted(expected)
    assert all(np.array_equal(got[name], expected[name]) for name in expected)


def test_llama3_style_bpe_is_recognised_by_its_split_regex(tiny_checkpoint, tmp_path, hf):
    """A Llama-3-style tokenizer (digits in groups of up to 3, whole-word lookup) gets tokenizer.ggml.pre
    'llama-bpe' from its definition alone, and llama.cpp then tokenizes exactly as Hugging Face does."""
    import json

    from converters.pretokenizers import LLAMA3_SPLIT

    _, transformers = hf
    checkpoint = tiny_checkpoint("llama", tokenizer="bpe")
    tokenizer = json.loads((checkpoint / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = LLAMA3_SPLIT
    tokenizer["model"]["ignore_merges"] = True
    (checkpoint / "tokenizer.json").write_text(json.dumps(tokenizer))
    written = convert(checkpoint, outdir=tmp_path, name="m", types=("bf16",), progress=False)
    assert gguf.GGUFReader(written["bf16"]).fields["tokenizer.ggml.pre"].contents() == "llama-bpe"
    reference = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = load(written["bf16"], vocab_only=True)
    for text in TEXTS + ["1234567 digits 12 and 123456789"]:
        expected = reference.encode(text, add_special_tokens=False)
        assert model.tokenize(text.encode(), add_bos=False, special=True) == expected, text
