"""Every supported architecture family converted end to end: a tiny random checkpoint of the family's real
layout (its config keys, fused or split projections, norms, biases, rope variant) converted to GGUF and
run by llama.cpp, its logits compared with transformers' on the same token ids.

The F16 file is compared tightly: BF16 weights are exact in F16, and llama.cpp's F16 matmuls round
activations to 11 significant bits, so what remains is far below what any missing feature (a soft-cap, a
sliding window, a rope base, a norm offset, a multiplier) changes. The BF16 file, whose matmuls round
activations to 8 bits, is compared as tests/test_convert.py does; the MXFP4 file must load and run."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from assistant.engine import backend
from assistant.errors import AssistantError
from converters import convert
from converters.random_checkpoint import DEMO_TOKENIZER, make_checkpoint

llama_cpp = pytest.importorskip("llama_cpp")

SHORT = [1.0, 1.5, 2.0, 4.0, 8.0, 16.0, 20.0, 30.0]  # LongRoPE factors for 16 rotary values
LONG = [2.0, 3.0, 5.0, 9.0, 17.0, 33.0, 40.0, 64.0]
# id -> (arch, make_checkpoint arguments): each family in the shapes and options its released models use,
# with windows, soft-caps, rope bases and multipliers sized so that each changes the logits of 48 tokens
CASES = {
    "smollm2-tied-9-heads": ("llama", {"tied": True, "hidden": 144, "heads": 9, "kv_heads": 3, "intermediate": 192,
                                       "rope_theta": 100000.0}),
    "llama-attention-and-mlp-biases": ("llama", {"bias": True, "mlp_bias": True}),
    "deepseek-coder-linear-rope": ("llama", {"rope_theta": 100000.0,
                                             "rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    "mistral-head-dim": ("mistral", {"head_dim": 32, "rope_theta": 1000000.0}),
    "codegemma": ("gemma", {"head_dim": 32}),
    "gemma2-softcaps-window": ("gemma2", {"head_dim": 32, "sliding_window": 8, "attn_logit_softcapping": 1.0,
                                          "final_logit_softcapping": 3.0}),
    "gemma3-local-rope-window": ("gemma3", {
        "head_dim": 32, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
        "rope_local_base_freq": 100.0, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    # transformers 5 writes rope settings per layer type in rope_parameters
    "gemma3-rope-parameters": ("gemma3", {"sliding_window": 8, "without": ["rope_theta", "rope_local_base_freq"],
                                          "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}}),
    "gemma3-untied-pattern": ("gemma3", {"tied": False, "sliding_window": 8, "sliding_window_pattern": 2,
                                         "rope_local_base_freq": 100.0}),
    "qwen2.5-yarn": ("qwen2", {"bias": True, "rope_theta": 1000000.0, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}}),
    "phi3-fused": ("phi3", {}),
    "phi3.5-longrope-short": ("phi3", {"max_position_embeddings": 16384, "rope_scaling": {
        "type": "longrope", "short_factor": SHORT, "long_factor": LONG}}),
    # llama.cpp takes the long factors once its context (256) passes the original one, transformers once the
    # sequence (48) does
    "phi4-mini-longrope-long-partial-tied": ("phi3", {
        "tied": True, "partial_rotary_factor": 0.75, "original_max_position_embeddings": 32,
        "max_position_embeddings": 1024, "rope_theta": 250000.0,
        "rope_scaling": {"type": "longrope", "short_factor": SHORT[:6], "long_factor": LONG[:6]}}),
    # transformers' default attention multiplier (1.0), four times llama.cpp's default 1/sqrt(head_dim)
    "granite-multipliers-tied": ("granite", {"tied": True, "attention_multiplier": 1.0}),
    "starcoder2-untied": ("starcoder2", {}),
    "starcoder2-tied": ("starcoder2", {"tied": True, "rope_theta": 100000.0}),
}
DIMS = ("hidden", "heads", "kv_heads", "intermediate", "head_dim")
TOKENS = [int(t) for t in np.random.default_rng(0).integers(0, 8000, 48)]


def tiny(directory, arch: str, tied: bool = False, bias: bool = False, without=(), **options):
    """A tiny random checkpoint with the demo tokenizer; ``without`` names config keys to leave out."""
    dims = {"hidden": 64, "layers": 2, "intermediate": 128, "heads": 4, "kv_heads": 2}
    dims.update({key: options.pop(key) for key in DIMS if key in options})
    checkpoint = make_checkpoint(directory, arch, vocab=8192, tied=tied, bias=bias, std=0.1,
                                 tokenizer_dir=DEMO_TOKENIZER, bos_token_id=8189, eos_token_id=8191, **dims, **options)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k not in without}))
    return checkpoint


def llama_logits(path) -> np.ndarray:
    backend.llama()  # the portable build's backends are modules, loaded from llama_cpp/lib first
    model = llama_cpp.Llama(str(path), n_threads=1, n_ctx=256, verbose=False, logits_all=True)
    model.eval(TOKENS)
    return np.array(model.scores[: len(TOKENS)])


@pytest.fixture(scope="module")
def transformers_logits():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()

    def run(checkpoint) -> np.ndarray:
        model, missing = transformers.AutoModelForCausalLM.from_pretrained(
            checkpoint, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
        assert not any(missing.values()), missing  # the random checkpoint has exactly the model's tensors
        with torch.no_grad():
            return model(torch.tensor([TOKENS])).logits[0].numpy()

    return run


@pytest.mark.parametrize("case", CASES)
def test_logits_match_transformers(tmp_path, transformers_logits, case):
    arch, options = CASES[case]
    checkpoint = tiny(tmp_path / "hf", arch, **options)
    written = convert(checkpoint, outdir=tmp_path, name="m", types=("f16", "bf16", "mxfp4"), progress=False)
    expected = transformers_logits(checkpoint)
    scale = np.abs(expected).max()

    f16 = llama_logits(written["f16"])
    # measured at most 0.3% of the largest logit; a missing feature moves them by 5% or more
    assert np.abs(f16 - expected).max() < 0.01 * scale, np.abs(f16 - expected).max() / scale

    bf16 = llama_logits(written["bf16"])
    assert np.abs(bf16 - expected).max() < 0.05 * scale, np.abs(bf16 - expected).max() / scale  # measured < 2.5%
    assert (bf16.argmax(-1) == expected.argmax(-1)).mean() > 0.9

    weights = [t for t in gguf.GGUFReader(written["mxfp4"]).tensors if t.name.startswith("blk.0.") and len(t.shape) == 2]
    assert weights
    for tensor in weights:  # rows of whole 32-value blocks are MXFP4, others fall back to BF16
        assert tensor.tensor_type == (Q.MXFP4 if tensor.shape[0] % 32 == 0 else Q.BF16), tensor.name
    assert np.isfinite(llama_logits(written["mxfp4"])).all()


@pytest.mark.parametrize("arch,expected", [
    ("llama", "llama"), ("mistral", "llama"), ("gemma", "gemma"), ("gemma2", "gemma2"), ("gemma3", "gemma3"),
    ("phi3", "phi3"), ("granite", "granite"), ("starcoder2", "starcoder2"),
])
def test_gguf_architecture_and_family_tensors(tmp_path, arch, expected):
    """The GGUF architecture llama.cpp picks its graph by, and the tensors only that graph reads."""
    checkpoint = tiny(tmp_path / "hf", arch)
    reader = gguf.GGUFReader(convert(checkpoint, outdir=tmp_path, name="m", types=("bf16",), progress=False)["bf16"])
    assert reader.fields["general.architecture"].contents() == expected
    names = {t.name for t in reader.tensors}
    family = {
        "phi3": {"blk.0.attn_qkv.weight", "blk.0.ffn_up.weight"},
        "gemma2": {"blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight"},
        "gemma3": {"blk.0.attn_q_norm.weight", "blk.1.post_ffw_norm.weight"},
        "starcoder2": {"blk.1.attn_norm.bias", "blk.0.ffn_up.bias", "output_norm.bias"},
    }.get(arch, {"blk.1.ffn_gate.weight"})
    assert family <= names
    if arch == "phi3":
        assert "blk.0.attn_q.weight" not in names and "blk.0.ffn_gate.weight" not in names
    if arch.startswith("gemma"):
        norms = [t for t in reader.tensors if t.name == "output_norm.weight"]
        assert np.asarray(norms[0].data).mean() > 1.5  # stored weight ~1 plus Gemma's implicit 1


def rewrite_config(checkpoint, **changes) -> None:
    path = checkpoint / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("arch,changes,message", [
    ("gemma2", {"tie_word_embeddings": False}, "tie_word_embeddings false is not supported"),
    ("gemma3", {"query_pre_attn_scalar": 100}, "query_pre_attn_scalar 100 differs from the 16"),
    ("gemma3", {"attn_logit_softcapping": 50.0}, "attn_logit_softcapping is not part of llama.cpp's gemma3"),
    ("gemma2", {"layer_types": ["sliding_attention"]}, "layer_types must name"),
    ("phi3", {"rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}},
     "long_factor must list 8 factors"),
    ("phi3", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope scaling type 'linear' is not supported"),
    ("llama", {"partial_rotary_factor": 0.5}, "rotates whole heads"),
    ("starcoder2", {"use_bias": False}, "use_bias false is not supported"),
    ("granite", {"logits_scaling": 0}, "logits_scaling must be a positive number"),
])
def test_configs_llama_cpp_cannot_express_are_refused(tmp_path, arch, changes, message):
    checkpoint = tiny(tmp_path / "hf", arch)
    rewrite_config(checkpoint, **changes)
    with pytest.raises(AssistantError, match=message) as refused:
        convert(checkpoint, outdir=tmp_path / "out", name="m", types=("bf16",), progress=False)
    assert str(refused.value).startswith(str(checkpoint / "config.json"))
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_starcoder2_without_its_biases_is_refused(tmp_path):
    """use_bias false checkpoints lack tensors llama.cpp's starcoder2 graph requires."""
    checkpoint = tiny(tmp_path / "hf", "starcoder2")
    source = checkpoint / "model.safetensors"
    from converters.random_checkpoint import write_bf16_tensors
    from converters.safetensors_file import SafetensorsFile

    original = SafetensorsFile(source)
    kept = [(name, entry.shape) for name, entry in original.entries.items() if name != "model.layers.1.mlp.c_proj.bias"]
    arrays = {name: np.array(original.array(original.entries[name])) for name, _ in kept}
    original.close()
    write_bf16_tensors(source, kept, lambda name, shape: arrays[name])
    with pytest.raises(AssistantError, match="lacks the blk.1.ffn_down.bias tensor a Starcoder2ForCausalLM needs"):
        convert(checkpoint, outdir=tmp_path / "out", name="m", types=("bf16",), progress=False)


@pytest.mark.parametrize("prefix", ["language_model.model.", "model.language_model."])
def test_gemma3_multimodal_checkpoint_converts_as_its_language_model(tmp_path, prefix):
    """Gemma 3 4B/12B/27B ship as Gemma3ForConditionalGeneration: text_config inside config.json, the language
    model's tensors under a prefix (transformers 4 or 5 layout), a vision tower beside them. Its GGUF is the
    one the same weights give as a text-only Gemma3ForCausalLM, tensor for tensor and key for key."""
    import shutil

    from converters.random_checkpoint import write_bf16_tensors
    from converters.safetensors_file import SafetensorsFile

    text = tiny(tmp_path / "text", "gemma3", sliding_window=8, rope_scaling={"rope_type": "linear", "factor": 8.0})
    multimodal = tmp_path / "multimodal"
    multimodal.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(text / name, multimodal / name)
    text_config = json.loads((text / "config.json").read_text())
    del text_config["architectures"]
    (multimodal / "config.json").write_text(json.dumps({
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text_config,
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32}, "mm_tokens_per_image": 4}))
    source = SafetensorsFile(text / "model.safetensors")
    head = "language_model.lm_head.weight" if prefix.startswith("language_model.") else "lm_head.weight"
    arrays = {(prefix + name.removeprefix("model.") if name != "lm_head.weight" else head): np.array(source.array(entry))
              for name, entry in source.entries.items()}
    assert head in arrays  # untied: the head's name moves too
    source.close()
    vision = {"vision_tower.vision_model.embeddings.patch_embedding.weight": (32, 3, 14, 14),
              "multi_modal_projector.mm_input_projection_weight": (32, 64)}
    vision = {("model." if prefix.startswith("model.") else "") + name: shape for name, shape in vision.items()}
    specs = [(name, array.shape) for name, array in arrays.items()] + list(vision.items())
    write_bf16_tensors(multimodal / "model.safetensors", specs,
                       lambda name, shape: arrays[name] if name in arrays else np.zeros(shape, np.uint16))

    files = [convert(source, outdir=tmp_path / source.name, name="m", types=("bf16",), progress=False)["bf16"]
             for source in (text, multimodal)]
    readers = [gguf.GGUFReader(path) for path in files]
    tensors = [{t.name: np.asarray(t.data) for t in reader.tensors} for reader in readers]
    assert sorted(tensors[0]) == sorted(tensors[1])
    assert all(np.array_equal(tensors[0][name], tensors[1][name]) for name in tensors[0])
    fields = [{key: field.contents() for key, field in reader.fields.items() if key.startswith("gemma3.")}
              for reader in readers]
    assert fields[0] == fields[1] and fields[0]["gemma3.rope.scaling.factor"] == 8.0


def test_gemma3_multimodal_text_config_defaults(tmp_path):
    """The published 4B config leaves most text keys to Gemma3TextConfig's defaults; they are read as
    transformers reads them."""
    from converters.architectures import read_architecture

    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": {
        "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}}
    arch = read_architecture(config, tmp_path / "config.json")
    assert (arch.gguf_name, arch.heads, arch.kv_heads, arch.head_dim, arch.vocab_size) == ("gemma3", 8, 4, 256, 262208)
    assert (arch.rope.theta, arch.rope.kind, arch.sliding_window, arch.tied) == (1000000.0, "linear", 1024, True)
    assert [layer for layer, sliding in enumerate(arch.sliding_layers) if not sliding] == [5, 11, 17, 23, 29]


@pytest.mark.parametrize("arch", ["gemma2", "gemma3", "phi3"])
def test_speculative_answer_equals_the_targets_on_converted_models(tmp_path, capsys, arch):
    """The converted pair runs the product's chain: the MXFP4 copy drafting for the BF16 target gives the
    target's own greedy answer, also where rejected drafts roll back a sliding-window cache (Gemma 2/3,
    window 8: every answer outgrows it)."""
    from assistant.cli import main

    window = {"sliding_window": 8} if arch.startswith("gemma") else {}
    written = convert(tiny(tmp_path / "hf", arch, **window), outdir=tmp_path, name="m", types=("bf16", "mxfp4"),
                      progress=False)
    answers = []
    for chain in (["--levels", "1"], ["--draft", written["mxfp4"], "--draft-length", "4", "--no-ngram"]):
        args = ["generate", "def fibonacci(n):", "--raw", "--greedy", "-n", "40", "--ctx", "256", "--json"]
        assert main([*args, "--target", str(written["bf16"]), *map(str, chain)]) == 0
        answers.append(json.loads(capsys.readouterr().out))
    alone, chained = answers
    assert chained["tokens"] == alone["tokens"] and len(alone["tokens"]) == 40
    draft = chained["stats"]["levels"][1]
    assert draft["proposed"] > draft["accepted"] > 0  # drafts were both taken and rolled back


@pytest.mark.parametrize("text_config,message", [
    ({"hidden_size": "big"}, '"text_config" field "hidden_size" must be an integer'),
    ({"vocab_size": 1 << 30}, "vocab_size 1073741824 is not a real vocabulary's size"),
])
def test_malformed_multimodal_text_config_is_one_line(tmp_path, text_config, message):
    checkpoint = tiny(tmp_path / "hf", "gemma3")
    config = json.loads((checkpoint / "config.json").read_text())
    rewrite_config(checkpoint, architectures=["Gemma3ForConditionalGeneration"], text_config={**config, **text_config})
    with pytest.raises(AssistantError, match=message):
        convert(checkpoint, outdir=tmp_path / "out", name="m", types=("bf16",), progress=False)


def test_gemma2_without_a_window_has_no_sliding_layers(tmp_path):
    """A Gemma 2 config with sliding_window null attends globally in transformers; llama.cpp's gemma2 assumes
    a 4096-token window unless the pattern says no layer slides (48 tokens cannot show it, the file can)."""
    checkpoint = tiny(tmp_path / "hf", "gemma2", sliding_window=None)
    reader = gguf.GGUFReader(convert(checkpoint, outdir=tmp_path, name="m", types=("bf16",), progress=False)["bf16"])
    assert reader.fields["gemma2.attention.sliding_window_pattern"].contents() == [False, False]
    assert "gemma2.attention.sliding_window" not in reader.fields
