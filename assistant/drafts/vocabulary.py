"""A draft that proposes only among the target's most used tokens: the target's GGUF (or its MXFP4 copy) with a
smaller vocabulary of its own, so its output projection, the largest matrix of a small model with a large
vocabulary (168M of Gemma 3 270M's parameters), shrinks with it. The target still verifies over its whole
vocabulary, so the answer is unchanged; a token the draft lacks is one it never proposes.

The draft's token i stands for the target's token ``target_ids[i]``, stored in the file (TARGET_IDS_KEY) with
the target's vocabulary size; engine/context.py maps ids in and out, so the chain sees the target's ids only.
Its last token is a stand-in with a zero embedding for every target token it lacks (fed as context, never
proposed). Kept: every token that is not plain text (control, byte, user-defined: the template's markers and
the byte fallback), then the commonest tokens in text on this machine (common_tokens). Not the tokens of the
text agreement is measured on: the measure would then not see what the trim loses."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from gguf import GGUFValueType as V

from assistant.drafts.rewrite import open_source, rewritten
from assistant.engine.model import TARGET_IDS_KEY, TARGET_VOCAB_KEY
from assistant.errors import AssistantError

CORPUS_CHARS = 3_000_000  # of text counted for how common each token is (1-3 s to tokenize)
ROWS_MULTIPLE = 64  # output rows our kernels take whole (an odd count left the trimmed BF16 target slower)
SIZES = (8192, 16384, 32768)  # vocabulary sizes tried, where at most 3/4 of the target's
STAND_IN = b"<|assistant-draft-other|>"
PLAIN_TYPES = (gguf.TokenType.NORMAL, gguf.TokenType.UNUSED)  # the types a trim may leave out
EMBEDDING_TENSORS = ("token_embd.weight", "output.weight")


def common_tokens(target: Path) -> np.ndarray:
    """The target's token ids, most common first in text like a coding assistant's: the Python standard library's
    own source (on every machine that runs us: code, comments and docstrings in English), up to CORPUS_CHARS;
    tokens it never uses follow in id order (a BPE vocabulary's merge rank, roughly how common a token was in
    the tokenizer's training text)."""
    from assistant.engine import Model

    with Model(target, vocab_only=True) as model:
        counts = np.zeros(model.n_vocab, dtype=np.int64)
        for text in _corpus():
            ids = model.tokenize(text, add_special=False, parse_special=False)
            np.add.at(counts, np.asarray(ids, dtype=np.int64), 1)
    return np.argsort(-counts, kind="stable")


def kept_tokens(source: Path, order: np.ndarray, size: int, extra=()) -> np.ndarray:
    """The target ids a vocabulary of about ``size`` keeps, ascending: every token that is not plain text, the
    ids ``extra``, then the commonest of ``order`` (common_tokens); with the stand-in, a multiple of ROWS_MULTIPLE
    tokens (``size`` where the first two fit in it)."""
    from assistant.engine.gguf_header import read_header

    types = read_header(source).number_array(gguf.Keys.Tokenizer.TOKEN_TYPE)  # without parsing every token
    if types is None:
        types = _token_types(open_source(source), source)
    keep = np.zeros(len(types), dtype=bool)
    keep[np.asarray(sorted(set(extra)), dtype=np.int64)] = True
    keep |= ~np.isin(types, [int(kind) for kind in PLAIN_TYPES])
    rows = -(-max(size, int(keep.sum()) + 1) // ROWS_MULTIPLE) * ROWS_MULTIPLE
    room = min(rows, len(types)) - 1 - int(keep.sum())
    if room > 0:
        candidates = np.asarray(order)[~keep[np.asarray(order)]]
        keep[candidates[:room]] = True
    return np.flatnonzero(keep)


def _corpus():
    """Texts of the standard library's modules, CORPUS_CHARS in all (fewer where it ships compiled only)."""
    import sysconfig

    left = CORPUS_CHARS
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        if left <= 0:
            return
        try:
            text = path.read_text(encoding="utf-8", errors="replace")[:left]
        except OSError:
            continue
        left -= len(text)
        yield text


def trimmed(source: Path, kept: np.ndarray, destination: Path) -> Path:
    """Write ``destination``: ``source`` with the vocabulary cut to the target ids ``kept`` (ascending) and a
    stand-in token; embedding and output rows cut alike, special-token ids renumbered."""
    source, destination = Path(source), Path(destination)
    reader = open_source(source)
    n_vocab = len(_token_types(reader, source))
    kept = np.asarray(kept, dtype=np.int64)
    if kept.size == 0 or kept[0] < 0 or kept[-1] >= n_vocab or np.any(np.diff(kept) <= 0):
        raise AssistantError(f"{source}: the kept token ids must be ascending, unique and under {n_vocab}")
    draft_id = np.full(n_vocab, -1, dtype=np.int64)
    draft_id[kept] = np.arange(kept.size)

    def metadata(items):
        changed = []
        for key, value, value_type, element_type in items:
            if key == gguf.Keys.Tokenizer.LIST:
                value = [value[i] for i in kept] + [STAND_IN]
            elif key == gguf.Keys.Tokenizer.SCORES:
                value = [value[i] for i in kept] + [min(value)]
            elif key == gguf.Keys.Tokenizer.TOKEN_TYPE:
                value = [value[i] for i in kept] + [int(gguf.TokenType.UNUSED)]
            elif key.startswith("tokenizer.ggml.") and key.endswith("_token_id") and value_type != V.ARRAY:
                if not 0 <= int(value) < n_vocab or draft_id[int(value)] < 0:
                    continue  # a special token the trim left out is no special token of the draft
                value = int(draft_id[int(value)])
            elif key.endswith(".vocab_size"):
                value = kept.size + 1
            changed.append((key, value, value_type, element_type))
        changed.append((TARGET_IDS_KEY, [int(i) for i in kept] + [-1], V.ARRAY, V.INT32))
        changed.append((TARGET_VOCAB_KEY, n_vocab, V.UINT32, None))
        return changed

    def tensor(info):
        if info.name not in EMBEDDING_TENSORS:
            return info.name, info.data
        rows = np.asarray(info.data)
        if rows.shape[0] != n_vocab:
            raise AssistantError(f"{source}: {info.name} has {rows.shape[0]} rows, not one per token ({n_vocab})")
        return info.name, np.concatenate([rows[kept], np.zeros((1,) + rows.shape[1:], dtype=rows.dtype)])

    return rewritten(source, destination, f" (vocabulary of {kept.size})", metadata, tensor, reader)


def _token_types(reader: gguf.GGUFReader, source: Path) -> np.ndarray:
    """Each token's type (gguf.TokenType); refuses a file without a vocabulary or with a trimmed one."""
    types = reader.fields.get(gguf.Keys.Tokenizer.TOKEN_TYPE)
    tokens = reader.fields.get(gguf.Keys.Tokenizer.LIST)
    if tokens is None:
        raise AssistantError(f"{source}: the GGUF file has no vocabulary ({gguf.Keys.Tokenizer.LIST}) to trim")
    if TARGET_IDS_KEY in reader.fields:
        raise AssistantError(f"{source}: this file's vocabulary is trimmed already")
    if types is None:
        return np.full(len(tokens.data), int(gguf.TokenType.NORMAL))
    return np.asarray(types.contents())
