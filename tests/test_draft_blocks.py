"""Drafts made by dropping blocks: every kept byte is the source's, the renumbering is what llama.cpp runs."""

import json
import re

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

from assistant.drafts.blocks import block_count, without_blocks
from assistant.engine import Context, Model
from assistant.engine.backend import llama
from assistant.engine.sequence import TokenSequence
from assistant.errors import AssistantError
from converters import convert
from converters.random_checkpoint import random_weights, tensor_specs, write_bf16_tensors

TOKENS = list(range(100, 116))
NOT_UTF8 = b"\xff\xfe raw bytes"
# (name, type, byte shape in numpy order): one tensor of each kind of storage the copy must not touch
SYNTHETIC_TENSORS = [("token_embd.weight", Q.F32, (4, 32)), ("blk.{i}.attn_norm.weight", Q.F16, (64,)),
                     ("blk.{i}.attn_q.weight", Q.BF16, (2, 64)), ("blk.{i}.attn_k.weight", Q.Q8_0, (2, 34)),
                     ("blk.{i}.ffn_up.weight", Q.Q4_K, (2, 144)), ("blk.{i}.ffn_down.weight", Q.MXFP4, (2, 17)),
                     ("rope_freqs.weight", Q.F32, (16,)), ("output.weight", Q.Q6_K, (4, 210))]


def _synthetic_gguf(path, blocks=3, with_block_count=True):
    """A GGUF gguf-py writes (never loaded by llama.cpp): per-layer arrays, look-alike arrays, raw strings,
    and tensors of many types filled with random bytes."""
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("synthetic")
    if with_block_count:
        writer.add_block_count(blocks)
    writer.add_key_value("llama.attention.head_count_kv", [1, 2, 4][:blocks], V.ARRAY, V.UINT32)
    writer.add_key_value("llama.attention.sliding_window_pattern", [True, False, True][:blocks], V.ARRAY, V.BOOL)
    writer.add_key_value("llama.rope.dimension_sections", [8, 8, 8, 8], V.ARRAY, V.INT32)  # not per layer
    writer.add_key_value("general.tags", [b"a", b"b", b"c"][:blocks], V.ARRAY, V.STRING)
    writer.add_key_value("llama.note", NOT_UTF8, V.STRING)
    writer.add_float32("llama.rope.freq_base", 10000.0)
    for template, qtype, byte_shape in SYNTHETIC_TENSORS:
        for i in range(blocks) if "{i}" in template else [None]:
            raw = rng.integers(0, 256, size=byte_shape, dtype=np.uint8)
            data = raw.view(np.float32 if qtype == Q.F32 else np.float16 if qtype == Q.F16 else np.uint8)
            writer.add_tensor(template.format(i=i), data, raw_shape=data.shape, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _fields(path) -> dict[str, bytes]:
    """Every key as the file stores it (name, type and value bytes), gguf-py's virtual GGUF.* ones aside."""
    reader = gguf.GGUFReader(path)
    return {key: b"".join(part.tobytes() for part in field.parts)
            for key, field in reader.fields.items() if not key.startswith("GGUF.")}


def _tensors(path) -> dict[str, tuple]:
    """name -> (type, shape, bytes), in the file's order."""
    return {t.name: (t.tensor_type, t.shape.tolist(), t.data.tobytes()) for t in gguf.GGUFReader(path).tensors}


def _field(path, key):
    return gguf.GGUFReader(path).fields[key].contents()


def _run(path, tokens=TOKENS) -> tuple[int, np.ndarray]:
    """(n_layer, logits of every position) as llama.cpp computes them."""
    with Model(path) as model, Context(model, n_ctx=64, threads=1) as context:
        return llama().llama_model_n_layer(model.handle), np.array(context.evaluate(TokenSequence(tokens), 0))


def _renamed(name, dropped):
    match = re.fullmatch(r"blk\.(\d+)\.(.+)", name)
    if match is None:
        return name
    index = int(match[1])
    return None if index in dropped else f"blk.{index - sum(d < index for d in dropped)}.{match[2]}"


def test_dropping_nothing_copies_every_key_and_byte(demo_gguf, tmp_path):
    source = demo_gguf["target_bf16"]
    copy = without_blocks(source, set(), tmp_path / "copy.gguf")
    assert copy == tmp_path / "copy.gguf" and block_count(copy) == block_count(source) == 8
    assert _fields(copy) == _fields(source)  # general.name too: nothing dropped, nothing to say
    assert list(_tensors(copy).items()) == list(_tensors(source).items())
    (layers, logits), (source_layers, source_logits) = _run(copy), _run(source)
    assert layers == source_layers == 8
    assert np.array_equal(logits, source_logits)


@pytest.mark.parametrize("kind", ["target_bf16", "target_mxfp4"])
def test_dropping_a_block_keeps_the_others_byte_for_byte(demo_gguf, tmp_path, kind):
    source = demo_gguf[kind]
    draft = without_blocks(source, {3}, tmp_path / "draft.gguf")
    assert block_count(draft) == 7 and _field(draft, "qwen2.block_count") == 7
    assert _field(draft, "general.name") == _field(source, "general.name") + " (block 3 dropped)"
    changed = {"qwen2.block_count", "general.name"}
    assert {k: v for k, v in _fields(draft).items() if k not in changed} == \
           {k: v for k, v in _fields(source).items() if k not in changed}

    source_tensors, draft_tensors = _tensors(source), _tensors(draft)
    expected = {_renamed(name, {3}): value for name, value in source_tensors.items() if _renamed(name, {3})}
    assert list(draft_tensors) == list(expected)  # names and order
    assert draft_tensors == expected  # types, shapes and bytes
    if kind == "target_mxfp4":
        assert any(qtype == Q.MXFP4 for qtype, _, _ in draft_tensors.values())

    (layers, logits), (_, source_logits) = _run(draft), _run(source)
    assert layers == 7
    assert np.isfinite(logits).all() and np.abs(logits - source_logits).max() > 1e-2


def test_per_layer_arrays_are_cut_and_every_tensor_type_copied(tmp_path):
    source = _synthetic_gguf(tmp_path / "synthetic.gguf")
    draft = without_blocks(source, frozenset({1}), tmp_path / "draft.gguf")
    assert _field(draft, "llama.block_count") == 2
    assert _field(draft, "llama.attention.head_count_kv") == [1, 4]
    assert _field(draft, "llama.attention.sliding_window_pattern") == [True, True]
    assert _field(draft, "llama.rope.dimension_sections") == [8, 8, 8, 8]
    assert _field(draft, "general.tags") == ["a", "b", "c"]  # as long as the blocks, but not the architecture's
    assert gguf.GGUFReader(draft).fields["llama.note"].parts[-1].tobytes() == NOT_UTF8
    assert _field(draft, "general.name") == "synthetic (block 1 dropped)"
    source_tensors = _tensors(source)
    expected = {_renamed(name, {1}): value for name, value in source_tensors.items() if _renamed(name, {1})}
    assert _tensors(draft) == expected and list(_tensors(draft)) == list(expected)
    assert {qtype for qtype, _, _ in expected.values()} == {qtype for _, qtype, _ in SYNTHETIC_TENSORS}


def test_dropping_an_identity_block_changes_nothing(tiny_checkpoint, tmp_path):
    """Block 1 adds zero to the residual stream (its attention output and FFN down projections are zero), so a
    draft without it must compute what the 3-block model does: proof that the kept blocks run in order."""
    checkpoint = tiny_checkpoint("llama", num_hidden_layers=3, std=0.1)
    config = json.loads((checkpoint / "config.json").read_text())
    weights = random_weights(seed=1, std=0.1)
    zeroed = {"model.layers.1.self_attn.o_proj.weight", "model.layers.1.mlp.down_proj.weight"}
    write_bf16_tensors(checkpoint / "model.safetensors", tensor_specs(config),
                       lambda name, shape: np.zeros(shape, np.uint16) if name in zeroed else weights(name, shape))
    source = convert(checkpoint, outdir=tmp_path, name="identity", types=("bf16",), progress=False)["bf16"]
    tensors = _tensors(source)
    assert not any(tensors["blk.1.attn_output.weight"][2]) and not any(tensors["blk.1.ffn_down.weight"][2])

    tokens = list(range(10, 26))
    layers, reference = _run(source, tokens)
    draft_layers, draft = _run(without_blocks(source, {1}, tmp_path / "without-1.gguf"), tokens)
    assert (layers, draft_layers) == (3, 2)
    np.testing.assert_allclose(draft, reference, atol=1e-3, rtol=0)
    _, other = _run(without_blocks(source, {2}, tmp_path / "without-2.gguf"), tokens)
    assert np.abs(other - reference).max() > 1e-2  # a block that does work: the check above can fail


@pytest.mark.parametrize("dropped, message", [({0, 1, 2}, "dropping all 3 blocks"), ({3}, "no block 3 to drop"),
                                              ({-1, 0}, "no block -1 to drop")])
def test_impossible_drops_are_one_line_errors_and_leave_no_file(tmp_path, dropped, message):
    source = _synthetic_gguf(tmp_path / "synthetic.gguf")
    outdir = tmp_path / "out"
    outdir.mkdir()
    with pytest.raises(AssistantError, match=re.escape(message)) as error:
        without_blocks(source, dropped, outdir / "draft.gguf")
    assert str(error.value).startswith(f"{source}: ") and "\n" not in str(error.value)
    assert list(outdir.iterdir()) == []


def test_a_file_without_block_count_is_refused(tmp_path):
    source = _synthetic_gguf(tmp_path / "synthetic.gguf", with_block_count=False)
    with pytest.raises(AssistantError, match=r"no llama\.block_count") as error:
        block_count(source)
    assert str(error.value).startswith(f"{source}: ")
    with pytest.raises(AssistantError, match=r"no llama\.block_count"):
        without_blocks(source, {1}, tmp_path / "draft.gguf")
    assert not (tmp_path / "draft.gguf").exists()


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    source = _synthetic_gguf(tmp_path / "synthetic.gguf")
    outdir = tmp_path / "out"
    outdir.mkdir()

    def disk_full(self, **_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", disk_full)
    with pytest.raises(AssistantError, match="No space left on device") as error:
        without_blocks(source, {1}, outdir / "draft.gguf")
    assert "\n" not in str(error.value)
    assert list(outdir.iterdir()) == []
