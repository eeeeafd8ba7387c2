"""`assistant generate` as a user runs it: streamed text, --json, --stats, and clear one-line errors."""

import json
import re
import subprocess
import sys

import gguf
import numpy as np
import pytest

from assistant import modelsets
from assistant.cli import main


def generate(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "assistant", "generate", *map(str, args)],
                          input=stdin, capture_output=True, text=True, timeout=300)


@pytest.fixture
def chain(bench_gguf):
    return ["--target", bench_gguf["target_bf16"], "--draft", bench_gguf["target_mxfp4"],
            "--draft", bench_gguf["draft_mxfp4"]]


def test_json_output_matches_the_target_alone(chain, bench_gguf, capsys):
    prompt = "Write a function that returns the squares of a list of numbers."
    assert main(["generate", prompt, *map(str, chain), "-n", "40", "--json"]) == 0
    three = json.loads(capsys.readouterr().out)
    assert main(["generate", prompt, "--target", str(bench_gguf["target_bf16"]), "-n", "40", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert three["tokens"] == alone["tokens"] and three["text"] == alone["text"]
    assert three["roles"] == ["target", "draft1", "draft2", "ngram"]  # adaptive: the n-gram level below
    assert len(three["levels"]) == len(three["tokens"]) == three["stats"]["new_tokens"]
    assert three["stats"]["levels"][1]["proposed"] > 0


def test_prompt_from_stdin_streams_text_and_stats(chain, bench_gguf):
    registered = modelsets.register("bench", [modelsets.Level("target", bench_gguf["target_bf16"]),
                                              modelsets.Level("draft", bench_gguf["draft_bf16"])])
    result = generate("--model-set", registered.name, "-n", "20", "--stats", "--raw", stdin="def add(a, b):\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert "tokens/s" in result.stderr and "level 1    draft" in result.stderr and "alpha" in result.stderr
    assert re.search(r"prompt \d+ tokens, 0 cached, in \d+\.\d\d s, first token at \d+\.\d\d s, "
                     r"then \d+\.\d tokens/s", result.stderr), result.stderr


def test_sampling_is_reproducible_with_a_seed(chain, tmp_path):
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text("Write a class for a stack.")
    runs = [generate("--prompt-file", prompt_file, *chain, "-n", "24", "--temp", "0.9", "--top-p", "0.95", "--seed", "7", "--json")
            for _ in range(2)]
    assert all(run.returncode == 0 for run in runs), runs[0].stderr
    assert json.loads(runs[0].stdout)["tokens"] == json.loads(runs[1].stdout)["tokens"]


def foreign_vocabulary(source, destination):
    """A copy of ``source`` whose tokenizer lists two tokens in the other order: another vocabulary."""
    reader = gguf.GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(destination), arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = field.contents()
        if field.name == "tokenizer.ggml.tokens":
            value[300], value[301] = value[301], value[300]
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub_type)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, np.asarray(tensor.data), raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return destination


def test_bad_input_gives_one_line_errors(bench_gguf, tmp_path):
    target = bench_gguf["target_bf16"]
    foreign = foreign_vocabulary(bench_gguf["draft_bf16"], tmp_path / "foreign.gguf")
    damaged = tmp_path / "damaged.gguf"
    damaged.write_bytes(bench_gguf["draft_bf16"].read_bytes()[:100_000])
    data = bench_gguf["draft_bf16"].read_bytes()
    cut = tmp_path / "cut.gguf"  # the header whole, a tenth of the weights missing
    cut.write_bytes(data[:len(data) * 9 // 10])
    short = tmp_path / "short.gguf"  # the last weight's last bytes missing
    short.write_bytes(data[:-100])
    (tmp_path / "odd.json").write_text('{"type": "integer", "multipleOf": 2}')
    (tmp_path / "broken.json").write_text('{"type": ')
    (tmp_path / "undefined.gbnf").write_text("root ::= nothing\n")
    cases = {
        "vocabulary differs from the target": ["hi", "--target", target, "--draft", foreign],
        "odd.json: not a JSON schema we can hold answers to at multipleOf": ["hi", "--json-schema",
                                                                             tmp_path / "odd.json"],
        "broken.json: not a JSON schema": ["hi", "--json-schema", tmp_path / "broken.json"],
        "refused the grammar: Undefined rule identifier 'nothing'": ["hi", "--target", target, "--grammar",
                                                                     tmp_path / "undefined.gbnf"],
        "missing.gguf: no such GGUF file": ["hi", "--target", tmp_path / "missing.gguf"],
        "damaged.gguf: truncated or damaged GGUF file": ["hi", "--target", target, "--draft", damaged],
        "cut.gguf: truncated or damaged GGUF file": ["hi", "--target", target, "--draft", cut],
        "short.gguf: llama.cpp could not load this GGUF": ["hi", "--target", target, "--draft", short],
        "prompt has": ["x = 1\n" * 400, "--target", target, "--ctx", "256"],
        "no model set named 'nope'": ["hi", "--model-set", "nope"],
        "--draft-length must be": ["hi", "--target", target, "--draft-length", "many"],
    }
    for message, args in cases.items():
        result = generate(*args)
        assert result.returncode == 1, (message, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
        assert "Traceback" not in result.stderr


def test_json_schema_holds_the_answer_to_it(chain, bench_gguf, tmp_path):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "size": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["name", "size"], "additionalProperties": False}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    answers = []
    for models in (chain, ["--target", bench_gguf["target_bf16"]]):
        result = generate("Describe a list as JSON.", *models, "--json-schema", tmp_path / "schema.json", "-n", "60",
                          "--json")
        assert result.returncode == 0, result.stderr
        answers.append(json.loads(result.stdout))
    value = json.loads(answers[0]["text"])
    assert set(value) == {"name", "size"} and 1 <= value["size"] <= 9 and len(value["name"]) <= 12
    assert answers[0]["tokens"] == answers[1]["tokens"]


def test_fresh_data_directory_answers_with_the_demo_set():
    """Like the chat, generate on a machine with no model set imports and uses the demo set."""
    result = generate("def add(a, b):", "-n", "8", "--raw")
    assert result.returncode == 0, result.stderr
    assert "preparing the demo set" in result.stderr
    assert result.stdout.strip()
    again = generate("def add(a, b):", "-n", "8", "--raw")
    assert again.returncode == 0 and "preparing" not in again.stderr and again.stdout == result.stdout
