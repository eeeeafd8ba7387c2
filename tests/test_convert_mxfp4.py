"""The MXFP4 copy. Our vectorised MXFP4 cast against gguf-py's reference quantizer, byte for byte, on values
that probe every rounding decision: random spreads over many magnitudes, exact ties, zeros, signs, huge and
tiny. Its output projection (tied or not) in the chosen type, recorded in the file, and a chain drafting with
it still giving the target's own answer."""

import json

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize as reference

from assistant.cli import main
from assistant.errors import AssistantError
from converters import convert, mxfp4, output_projection
from converters.encodings import as_bf16_bits as bf16_bits
from converters.safetensors_file import SafetensorsFile


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("scale", [1e-30, 1e-3, 0.02, 1.0, 300.0, 1e30])
def test_random_values_match_reference(scale):
    rng = np.random.default_rng(int(np.log10(scale) + 40))
    values = (rng.standard_normal((32, 512)) * scale * np.exp(rng.uniform(-3, 3, (32, 1)))).astype(np.float32)
    assert np.array_equal(mxfp4.quantize(values), reference(values, Q.MXFP4))
    bits = bf16_bits(values)
    assert np.array_equal(mxfp4.quantize(bits, bf16_bits=True), reference(bf16_values(bits), Q.MXFP4))


def test_ties_zeros_and_signs_match_reference():
    grid = np.array([0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6], dtype=np.float32)
    ties = np.concatenate([grid, -grid, [np.float32(-0.0)]])
    values = np.zeros((4, 64), dtype=np.float32)
    values[0, : ties.size] = ties  # amax 6: every decision point of the E2M1 grid, exactly
    values[1, : ties.size] = ties * np.float32(1 + 2**-20)  # just above the decision points (float32 only)
    values[2, :32] = -np.float32(2**-130)  # subnormal block
    values[3, 5] = np.float32(-1.0)
    assert np.array_equal(mxfp4.quantize(values), reference(values, Q.MXFP4))
    bits = bf16_bits(values)
    assert np.array_equal(mxfp4.quantize(bits, bf16_bits=True), reference(bf16_values(bits), Q.MXFP4))


def test_rows_must_be_whole_blocks():
    with pytest.raises(ValueError, match="multiple of 32"):
        mxfp4.quantize(np.zeros((2, 48), dtype=np.float32))


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("choice", [None, "q8_0", "bf16"])
def test_output_projection_in_the_chosen_type_and_recorded(tiny_checkpoint, tmp_path, tied, choice):
    """The copy's output projection (token_embd when tied) and token embeddings are the direct cast of the
    checkpoint's in the chosen type (MXFP4 by default), the other weights MXFP4; the type is recorded under
    our key in the copy only."""
    checkpoint = tiny_checkpoint("qwen2", tied=tied)
    options = {"mxfp4_output": choice} if choice else {}
    written = convert(checkpoint, outdir=tmp_path, name="m", progress=False, **options)
    wanted = Q[(choice or "mxfp4").upper()]
    tensors = {t.name: t for t in gguf.GGUFReader(written["mxfp4"]).tensors}
    source = SafetensorsFile(checkpoint / "model.safetensors")
    heads = ["token_embd.weight"] + ([] if tied else ["output.weight"])
    assert ("output.weight" in tensors) == (not tied)
    for name, hf_name in zip(heads, ["model.embed_tokens.weight", "lm_head.weight"]):
        values = (np.array(source.array(source.entries[hf_name])).astype(np.uint32) << 16).view(np.float32)
        assert tensors[name].tensor_type == wanted, name
        if wanted != Q.BF16:
            expected = reference(values, wanted)
            assert np.array_equal(np.asarray(tensors[name].data).reshape(expected.shape), expected), name
    source.close()
    assert tensors["blk.0.ffn_up.weight"].tensor_type == Q.MXFP4
    assert output_projection.recorded(written["mxfp4"]) == wanted.name
    assert gguf.GGUFReader(written["mxfp4"]).fields[output_projection.KEY].contents() == wanted.name
    assert output_projection.recorded(written["bf16"]) is None


def test_an_unknown_output_projection_type_is_refused(tiny_checkpoint, tmp_path, capsys):
    checkpoint = tiny_checkpoint("qwen2")
    with pytest.raises(SystemExit):
        main(["convert", str(checkpoint), "--outdir", str(tmp_path), "--mxfp4-output", "q4_0"])
    assert "--mxfp4-output/--mxfp4-embeddings: invalid choice: 'q4_0'" in capsys.readouterr().err
    with pytest.raises(AssistantError, match="output projection.*choose from bf16, q8_0, mxfp4"):
        convert(checkpoint, outdir=tmp_path, name="m", progress=False, mxfp4_output="f16")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("choice", ["mxfp4", "q8_0"])
def test_a_chain_drafting_with_the_quantized_head_gives_the_target_answer(tiny_checkpoint, tmp_path, capsys, choice):
    """Tied embeddings quantized: llama.cpp reads the same matrix for the embedding rows (GET_ROWS) and the
    head's product. Drafting with the copy, the chain's greedy answer is the target's alone, and the target
    accepts a good share of the copy's drafts (a head read wrongly would have them all rejected; random
    weights make a flat distribution, so the share is lower than a trained model's)."""
    checkpoint = tiny_checkpoint("qwen2", tied=True, seed=1, std=0.15)  # varied text, not one repeated token
    written = convert(checkpoint, outdir=tmp_path, name="m", progress=False, mxfp4_output=choice)
    prompt = ["def add(a, b):\n    return a + b\n", "--raw", "-n", "48", "--json", "--threads", "1"]
    assert main(["generate", *prompt, "--target", str(written["bf16"])]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main(["generate", *prompt, "--target", str(written["bf16"]), "--draft", str(written["mxfp4"]),
                 "--draft-length", "4", "--no-ngram"]) == 0
    chain = json.loads(capsys.readouterr().out)
    assert chain["tokens"] == alone["tokens"] and len(set(alone["tokens"])) > 24
    copy = chain["stats"]["levels"][1]
    assert copy["proposed"] >= 24 and copy["accepted"] > 0.2 * copy["proposed"], copy
