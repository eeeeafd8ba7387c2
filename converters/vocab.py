"""Tokenizer -> GGUF vocabulary: byte-level BPE ("gpt2") and Llama-style SentencePiece ("llama"), from
tokenizer.json or, without it, a SentencePiece tokenizer.model.

The BPE pre-tokenizer name llama.cpp needs is recognised from the definition in tokenizer.json (its split
regexes and byte-level flags compared by content with the table in pretokenizers.py), never guessed from
model names.
Special tokens, merges and the chat template come from gguf-py's SpecialVocab.
"""

from __future__ import annotations

import re
from pathlib import Path

import gguf

from assistant.errors import AssistantError
from converters.checkpoint import read_json
from converters.pretokenizers import find_pre_tokenizer, known_names, whole_word_lookup
from converters.sentencepiece_model import read_sentencepiece_model

BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def recognise_pre_tokenizer(tokenizer: dict, path: Path) -> str:
    entry = find_pre_tokenizer(tokenizer)
    if entry is None:
        raise AssistantError(f"{path}: unrecognised byte-level BPE pre-tokenizer (known: {', '.join(known_names())})")
    if entry.differs:
        raise AssistantError(f"{path}: the {entry.name} pre-tokenizer ({entry.families}) is not supported: "
                             f"the pinned llama.cpp splits text differently ({entry.differs})")
    if entry.ignore_merges != whole_word_lookup(tokenizer):
        raise AssistantError(f"{path}: the {entry.name} pre-tokenizer with BPE ignore_merges "
                             f"{str(not entry.ignore_merges).lower()} is not supported: the pinned llama.cpp has this "
                             f"split only with ignore_merges {str(entry.ignore_merges).lower()}, so some words would "
                             f"tokenize differently")
    return entry.name


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
    if not path.is_file() and not (directory / "tokenizer.model").is_file():
        raise AssistantError(f"{path}: missing; the tokenizer files must sit beside the weights")
    if not (directory / "tokenizer_config.json").is_file():
        raise AssistantError(f"{directory / 'tokenizer_config.json'}: missing; the tokenizer files must sit beside the weights")
    if not path.is_file():
        return _add_sentencepiece_model(writer, directory / "tokenizer.model", vocab_size)
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


def _add_sentencepiece_model(writer: gguf.GGUFWriter, path: Path, vocab_size: int) -> None:
    """A tokenizer.model without tokenizer.json (older Llama 2 derivatives): converted where llama.cpp's
    SentencePiece tokenizer splits as SentencePiece does, a BPE model that leaves text as it is."""
    model = read_sentencepiece_model(path)
    fix = "; write tokenizer.json beside it with transformers: AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)"
    if model.model_type != "BPE":
        raise AssistantError(f"{path}: a SentencePiece {model.model_type} model is not supported: llama.cpp tokenizes "
                             f"only BPE ones as SentencePiece does{fix}")
    if model.normalizer != "identity" or model.remove_extra_whitespaces:
        what = "collapses runs of spaces" if model.normalizer == "identity" else f"normalizes text ({model.normalizer})"
        raise AssistantError(f"{path}: this SentencePiece model {what}, which llama.cpp does not{fix}")
    user_defined = [text for text, _, kind in model.pieces if kind == gguf.TokenType.USER_DEFINED]
    if user_defined:
        raise AssistantError(f"{path}: user-defined pieces ({', '.join(user_defined[:3])}...) are not supported: llama.cpp "
                             f"puts a leading space after each, SentencePiece only at the start{fix}")
    if len(model.pieces) > vocab_size:
        raise AssistantError(f"{path}: {len(model.pieces)} pieces, beyond the model's vocab_size {vocab_size} (config.json)")
    padding = [(f"[PAD{i}]", 0.0, gguf.TokenType.UNUSED) for i in range(len(model.pieces), vocab_size)]
    texts, scores, types = zip(*(model.pieces + padding))
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(list(texts))
    writer.add_token_scores(list(scores))
    writer.add_token_types(list(types))
    writer.add_add_space_prefix(model.add_dummy_prefix)
    gguf.SpecialVocab(path.parent, load_merges=False, n_vocab=vocab_size).add_to_gguf(writer, quiet=True)


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
