"""Tokenizer -> GGUF vocabulary: byte-level BPE ("gpt2") and Llama-style SentencePiece ("llama").

The BPE pre-tokenizer name llama.cpp needs is recognised from the definition in tokenizer.json (its split
regexes and byte-level flags compared by content with the ones we know), never guessed from model names.
Special tokens, merges and the chat template come from gguf-py's SpecialVocab.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import gguf

from assistant.errors import AssistantError
from converters.checkpoint import read_json

QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# pre-tokenizer definition (as `_pre_tokenizer_steps` describes it) -> llama.cpp's tokenizer.ggml.pre
KNOWN_PRE_TOKENIZERS = {
    (("Split", QWEN2_SPLIT, "Isolated", False), ("ByteLevel", False)): "qwen2",
    (("Split", LLAMA3_SPLIT, "Isolated", False), ("ByteLevel", False)): "llama-bpe",
    (("ByteLevel", True),): "gpt-2",
}
BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _pre_tokenizer_steps(tokenizer: dict) -> tuple:
    """The parts of a pre-tokenizer that decide how text is split, in a comparable form."""
    pre = tokenizer.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre] if pre else []
    described = []
    for step in steps:
        kind = step.get("type")
        if kind == "Split":
            pattern = step.get("pattern", {})
            described.append(("Split", pattern.get("Regex", pattern.get("String")), step.get("behavior"),
                              bool(step.get("invert", False))))
        elif kind == "ByteLevel":
            if step.get("add_prefix_space"):
                described.append(("ByteLevel", bool(step.get("use_regex", True)), "add_prefix_space"))
            else:
                described.append(("ByteLevel", bool(step.get("use_regex", True))))
        else:
            described.append((kind, json.dumps(step, sort_keys=True)))
    return tuple(described)


def recognise_pre_tokenizer(tokenizer: dict, path: Path) -> str:
    steps = _pre_tokenizer_steps(tokenizer)
    name = KNOWN_PRE_TOKENIZERS.get(steps)
    if name is None:
        known = ", ".join(sorted(KNOWN_PRE_TOKENIZERS.values()))
        raise AssistantError(f"{path}: unrecognised byte-level BPE pre-tokenizer (known: {known})")
    return name


def is_sentencepiece_kind(tokenizer: dict) -> bool:
    """Llama/Mistral tokenizer.json files are SentencePiece BPE re-expressed: byte fallback, '▁' for spaces."""
    model = tokenizer.get("model", {})
    return model.get("type") == "BPE" and bool(model.get("byte_fallback"))


def _tokens_by_id(tokenizer: dict, path: Path, vocab_size: int) -> tuple[list[str | None], dict[int, dict]]:
    tokens: list[str | None] = [None] * vocab_size
    added = {entry["id"]: entry for entry in tokenizer.get("added_tokens", [])}
    entries = list(tokenizer.get("model", {}).get("vocab", {}).items()) + [(e["content"], i) for i, e in added.items()]
    for text, token_id in entries:
        if not 0 <= token_id < vocab_size:
            raise AssistantError(
                f"{path}: token {text!r} has id {token_id}, beyond the model's vocab_size {vocab_size} (config.json)"
            )
        tokens[token_id] = text
    return tokens, added


def _merge_scores(tokenizer: dict) -> dict[str, float]:
    """SentencePiece merges by the score of the merged piece; we rank pieces by their first merge."""
    scores: dict[str, float] = {}
    for rank, merge in enumerate(tokenizer.get("model", {}).get("merges", [])):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        scores.setdefault(left + right, -float(rank))
    return scores


def add_vocabulary(writer: gguf.GGUFWriter, directory: Path, vocab_size: int) -> None:
    path = directory / "tokenizer.json"
    if not path.is_file():
        other = " (tokenizer.model alone is not supported: tokenizer.json is needed)" if (directory / "tokenizer.model").is_file() else ""
        raise AssistantError(f"{path}: missing{other}; the tokenizer files must sit beside the weights")
    if not (directory / "tokenizer_config.json").is_file():
        raise AssistantError(f"{directory / 'tokenizer_config.json'}: missing; the tokenizer files must sit beside the weights")
    tokenizer = read_json(path)
    read_json(directory / "tokenizer_config.json")
    tokens, added = _tokens_by_id(tokenizer, path, vocab_size)
    sentencepiece = is_sentencepiece_kind(tokenizer)
    if not sentencepiece and tokenizer.get("model", {}).get("type") != "BPE":
        raise AssistantError(f"{path}: tokenizer model {tokenizer.get('model', {}).get('type')!r} is not supported (BPE)")
    scores = _merge_scores(tokenizer) if sentencepiece else {}
    unk = tokenizer.get("model", {}).get("unk_token")
    texts, types, token_scores = [], [], []
    T = gguf.TokenType
    for token_id, text in enumerate(tokens):
        if text is None:
            texts.append(f"[PAD{token_id}]")
            types.append(T.UNUSED)
        elif token_id in added:
            texts.append(text)
            types.append(T.CONTROL if added[token_id].get("special") else T.USER_DEFINED)
        elif sentencepiece and text == unk:
            texts.append(text)
            types.append(T.UNKNOWN)
        elif sentencepiece and BYTE_TOKEN.fullmatch(text):
            texts.append(text)
            types.append(T.BYTE)
        else:
            texts.append(text)
            types.append(T.NORMAL)
        token_scores.append(scores.get(text, 0.0))

    if sentencepiece:
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_scores(token_scores)
        writer.add_add_space_prefix(_adds_space_prefix(tokenizer))
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(recognise_pre_tokenizer(tokenizer, path))
    writer.add_token_list(texts)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(directory, load_merges=not sentencepiece, n_vocab=vocab_size)
    special.add_to_gguf(writer, quiet=True)


def _adds_space_prefix(tokenizer: dict) -> bool:
    """Legacy Llama tokenizers prepend '▁' in the normalizer; newer ones in a Metaspace pre-tokenizer."""
    pieces = [tokenizer.get("normalizer") or {}, tokenizer.get("pre_tokenizer") or {}]
    for piece in list(pieces):
        pieces += piece.get("normalizers", []) + piece.get("pretokenizers", [])
    for piece in pieces:
        if piece.get("type") == "Prepend":
            return True
        if piece.get("type") == "Metaspace":
            return piece.get("prepend_scheme", "always") != "never" and piece.get("add_prefix_space", True)
    return False
