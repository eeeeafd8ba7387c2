"""Byte-level BPE pre-tokenizers: the tokenizer.json definitions models ship, and the llama.cpp name
(tokenizer.ggml.pre) that splits text the same way.

Recognised by content, never by model name: a definition is the list of pre-tokenizer steps as tokenizer.json
writes them (Split regex and behavior, Digits, Punctuation, ByteLevel flags), compared with the ones below.
Several llama.cpp names share one split (gpt-2, mpt, olmo...): each entry names one of them and lists the
families whose files use it. A name also fixes BPE's whole-word lookup (`ignore_merges` in tokenizer.json), so a
file is converted only when its flag equals the entry's. Every definition is checked by
tests/test_convert_tokenizers.py, which trains a vocabulary with it and requires llama.cpp's token ids to equal
Hugging Face tokenizers'; where they differ the entry says how, and the converter refuses it saying so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# --- the split regexes, as tokenizer.json spells them ------------------------------------------------------
CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
# cl100k (Llama 3, DBRX): letters after one optional non-letter, digits in threes, punctuation runs
LLAMA3_SPLIT = (CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                r"|\s+(?!\S)|\s+")
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")  # one digit at a time
QWEN35_SPLIT = (CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
UFAKZEKA_SPLIT = QWEN2_SPLIT.replace(CONTRACTIONS + "|", "")  # Qwen2's without English contractions
MINICPM5_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}+")  # after a \p{N}{1,3} split of its own
SEED_CODER_SPLIT = (CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+"
                    r"|\s+(?!\S)|\s+")
# Ling / LLaDA: Qwen2's with possessive quantifiers and single line breaks
BAILINGMOE_SPLIT = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*"
                    r"|\s*[\r\n]|\s+(?!\S)|\s+")
EXAONE_MOE_SPLIT = (CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
                    r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")
JAIS2_SPLIT = LLAMA3_SPLIT.replace(r"|\s+(?!\S)|\s+", "".join(
    rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4)) + r"|\s{1,2}(?!\S)|\s{1}")
# o200k (GPT-4o, Phi-4-mini, Llama 4): words split before an upper-case letter that follows lower case
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
GPT4O_SPLIT = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{CONTRACTIONS}?|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
               rf"{CONTRACTIONS}?|\p{{N}}{{1,3}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN_SPLIT = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*|\p{{N}}"
                rf"| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DIGIT_GROUPS_SPLIT = r"\d{1,3}(?=(?:\d{3})*\b)"  # Tiny Aya: 1234567 -> 1 234 567
# BLOOM family: everything up to whitespace or sentence punctuation
BLOOM_SPLIT = " ?[^(\\s|[.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c])]+"
# DeepSeek V3: digits in threes, CJK and kana runs, then words and punctuation runs
DEEPSEEK_V3_DIGITS = r"\p{N}{1,3}"
DEEPSEEK_V3_CJK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
DEEPSEEK_V3_SPLIT = (r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
                     r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek LLM / Coder (first generation): line breaks, letter runs, punctuation runs, CJK runs apart
DEEPSEEK_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
DEEPSEEK_LLM_LETTERS = (
    "\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377"
    "\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
    "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d"
    "\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb"
    "\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
    "\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4"
    "\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
    "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+"
)
DEEPSEEK_LLM_PUNCTUATION = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"


# --- tokenizer.json steps ------------------------------------------------------------------------------------
def split(regex: str, behavior: str = "Isolated") -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": behavior, "invert": False}


def digits(individual: bool) -> dict:
    return {"type": "Digits", "individual_digits": individual}


def byte_level(use_regex: bool) -> dict:
    """ByteLevel with use_regex splits by GPT-2's own regex first; without, it only maps bytes to characters."""
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def punctuation(behavior: str) -> dict:
    return {"type": "Punctuation", "behavior": behavior}


@dataclass(frozen=True)
class PreTokenizer:
    name: str  # llama.cpp's tokenizer.ggml.pre
    families: str  # whose tokenizer.json files carry it (for the README and error messages)
    definitions: tuple[tuple[dict, ...], ...]  # each a list of steps as tokenizer.json writes them
    ignore_merges: bool = False  # what llama.cpp applies for this name: a whole word in the vocab is one token
    differs: str = ""  # where llama.cpp's split disagrees with Hugging Face's: then it is refused, saying so


# llama.cpp's tekken and gpt-4o splits stand in for the upper/lower classes with "a letter but not a-z", which
# leaves combining marks out
COMBINING_MARK = "Hugging Face keeps ' e\\u0301' (e and a combining accent) one word, llama.cpp splits the accent off"


def _one(*steps: dict) -> tuple[tuple[dict, ...], ...]:
    return (steps,)


PRE_TOKENIZERS = (
    PreTokenizer("gpt-2", "GPT-2, GPT-NeoX, MPT, OLMo, Phi-2, Jais, EXAONE 4", _one(byte_level(True))),
    PreTokenizer("smollm", "SmolLM/SmolLM2, StarCoder/StarCoder2, Granite 3.x and Granite Code, Command-R, CodeShell",
                 _one(digits(True), byte_level(True))),
    PreTokenizer("llama-bpe", "Llama 3.x", _one(split(LLAMA3_SPLIT), byte_level(False)),
                 ignore_merges=True),
    PreTokenizer("dbrx", "DBRX; Llama 3's split without ignore_merges", _one(split(LLAMA3_SPLIT), byte_level(False))),
    PreTokenizer("qwen2", "Qwen1.5/2/2.5/3 (and Coder), DeepSeek-R1-Distill-Qwen, StableLM 2, Hunyuan, Grok 2",
                 _one(split(QWEN2_SPLIT), byte_level(False))),
    PreTokenizer("qwen35", "Qwen3.5", _one(split(QWEN35_SPLIT), byte_level(False))),
    # llama.cpp's own "gpt-4o" name splits combining marks off (see COMBINING_MARK); this one is the same split
    # with them kept on their letters, as Hugging Face does
    PreTokenizer("granite-embed-multi-97m", "o200k (GPT-4o) files with ignore_merges",
                 _one(split(GPT4O_SPLIT), byte_level(False)), ignore_merges=True),
    PreTokenizer("tekken", "Mistral Nemo, Ministral, Pixtral", _one(split(TEKKEN_SPLIT), byte_level(False)),
                 ignore_merges=True, differs=COMBINING_MARK),
    PreTokenizer("deepseek-v3", "DeepSeek V3/R1, Hunyuan dense, JoyAI",
                 _one(split(DEEPSEEK_V3_DIGITS), split(DEEPSEEK_V3_CJK), split(DEEPSEEK_V3_SPLIT), byte_level(False))),
    PreTokenizer("deepseek-llm", "DeepSeek LLM (first generation)",
                 _one(split("[\r\n]"), split(DEEPSEEK_LLM_LETTERS), split(DEEPSEEK_LLM_PUNCTUATION), split(r"\s+$"),
                      split(DEEPSEEK_CJK), digits(True), byte_level(False))),
    PreTokenizer("deepseek-coder", "DeepSeek Coder (first generation)",
                 _one(split("[\r\n]"), split(r"\s?\p{L}+"), split(r"\s?\p{P}+"), split(DEEPSEEK_CJK), digits(True),
                      byte_level(False))),
    PreTokenizer("falcon", "Falcon (first generation)",
                 _one(punctuation("Contiguous"), byte_level(True), digits(False), split("[0-9][0-9][0-9]"))),
    PreTokenizer("bloom", "BLOOM, Poro, GPT-3 Finnish", _one(split(BLOOM_SPLIT), byte_level(False))),
    PreTokenizer("viking", "Viking", _one(split(BLOOM_SPLIT), digits(True), byte_level(False))),
    PreTokenizer("tiny_aya", "Tiny Aya, Cohere 2 MoE",
                 _one(split(DIGIT_GROUPS_SPLIT), split(GPT4O_SPLIT), byte_level(False))),
    PreTokenizer("minicpm5", "MiniCPM 5", _one(split(r"\p{N}{1,3}"), split(MINICPM5_SPLIT), byte_level(False)),
                 ignore_merges=True),
    PreTokenizer("seed-coder", "Seed-Coder", _one(split(SEED_CODER_SPLIT), byte_level(False))),
    PreTokenizer("bailingmoe", "Ling, LLaDA-MoE", _one(split(BAILINGMOE_SPLIT), byte_level(False))),
    PreTokenizer("exaone-moe", "K-EXAONE", _one(split(EXAONE_MOE_SPLIT), byte_level(False))),
    PreTokenizer("jais-2", "Jais 2", _one(split(JAIS2_SPLIT), byte_level(False))),
    PreTokenizer("ufakzeka", "ufakzeka", _one(split(UFAKZEKA_SPLIT), byte_level(False))),
    PreTokenizer("laguna", "Laguna", _one(split(r"(?:\r?\n)+(?!\r?\n)", "MergedWithNext"), split(QWEN2_SPLIT),
                                          byte_level(False)),
                 differs="Hugging Face keeps CRLF line breaks whole, llama.cpp splits '\\r' from '\\n'"),
)


def _canonical_regex(regex: str) -> str:
    """tokenizer.json files write line breaks in regexes both as escapes and as raw characters."""
    return regex.replace("\r", r"\r").replace("\n", r"\n").replace("\t", r"\t")


def _flatten(step: dict | None) -> list[dict]:
    if not step:
        return []
    if step.get("type") == "Sequence":
        return [inner for child in step.get("pretokenizers", []) for inner in _flatten(child)]
    return [step]


def describe(steps) -> tuple:
    """The parts of each step that decide how text is split, in a comparable form (offsets options dropped)."""
    described = []
    for step in steps:
        kind = step.get("type")
        if kind == "Split":
            pattern = step.get("pattern", {})
            regex = pattern.get("Regex")
            text = ("Regex", _canonical_regex(regex)) if regex is not None else ("String", pattern.get("String"))
            described.append(("Split", text, step.get("behavior"), bool(step.get("invert", False))))
        elif kind == "ByteLevel":
            described.append(("ByteLevel", bool(step.get("add_prefix_space", True)), bool(step.get("use_regex", True))))
        elif kind == "Digits":
            described.append(("Digits", bool(step.get("individual_digits", False))))
        elif kind == "Punctuation":
            described.append(("Punctuation", step.get("behavior", "Isolated")))
        else:
            described.append((kind, json.dumps(step, sort_keys=True)))
    return tuple(described)


def pre_tokenizer_json(steps: tuple[dict, ...]) -> dict:
    """A definition as tokenizer.json's `pre_tokenizer` value."""
    return steps[0] if len(steps) == 1 else {"type": "Sequence", "pretokenizers": list(steps)}


def find_pre_tokenizer(tokenizer: dict) -> PreTokenizer | None:
    """The entry whose definition equals this tokenizer.json's; among entries with the same definition, the one
    whose whole-word lookup (BPE `ignore_merges`) matches the file's, then one llama.cpp splits as Hugging Face
    does. The caller refuses an entry that differs in either way."""
    found = describe(_flatten(tokenizer.get("pre_tokenizer")))
    ignore_merges = whole_word_lookup(tokenizer)
    matches = [entry for entry in PRE_TOKENIZERS if any(describe(d) == found for d in entry.definitions)]
    matches.sort(key=lambda entry: (entry.ignore_merges != ignore_merges, bool(entry.differs)))
    return matches[0] if matches else None


def whole_word_lookup(tokenizer: dict) -> bool:
    """BPE `ignore_merges`: a word that is in the vocabulary is one token, whatever the merges would make of it."""
    return bool(tokenizer.get("model", {}).get("ignore_merges", False))


def known_names() -> list[str]:
    """The names a converted file may carry (those llama.cpp splits as Hugging Face does)."""
    return [entry.name for entry in PRE_TOKENIZERS if not entry.differs]
