"""The JSON files beside the weights (config.json, tokenizer.json, tokenizer_config.json), checked for the
types conversion relies on before anything reads them, so a malformed or hostile file is refused with one
line naming the file and the key, never a traceback or a gigantic allocation half-way.

Only what conversion (and gguf-py's SpecialVocab) reads is checked; unknown keys pass. An architecture that
reads a new config key adds it to CONFIG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from assistant.errors import AssistantError

# The largest vocabularies in use have about 256k entries; the vocabulary list is sized by vocab_size, so a
# config naming far more is refused before anything is allocated or downloaded.
MAX_VOCAB = 1 << 22

# A kind returns None for a value it accepts, else what is wrong with it ("must be ..., not ...").
Kind = Callable[[object], "str | None"]


def _shown(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def simple(accepts: Callable[[object], bool], says: str) -> Kind:
    def kind(value):
        return None if accepts(value) else f"must be {says}, not {_shown(value)}"
    kind.says = says
    return kind


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


INT = simple(_is_int, "an integer")
NUMBER = simple(lambda v: _is_int(v) or isinstance(v, float), "a number")
BOOL = simple(lambda v: isinstance(v, bool), "true or false")
STRING = simple(lambda v: isinstance(v, str), "a string")
OBJECT = simple(lambda v: isinstance(v, dict), "an object")
TOKEN_ID = simple(lambda v: _is_int(v) and v >= 0, "a token id (an integer, 0 or more)")


def optional(kind: Kind) -> Kind:
    def checked(value):
        return None if value is None else kind(value)
    checked.says = f"{kind.says} or null"
    return checked


def either(*kinds: Kind) -> Kind:
    says = " or ".join(kind.says for kind in kinds)
    return simple(lambda v: any(kind(v) is None for kind in kinds), says)


def list_of(item: Kind) -> Kind:
    def kind(value):
        if not isinstance(value, list):
            return f"must be a list, not {_shown(value)}"
        return next((f"item {index} {problem}" for index, element in enumerate(value)
                     if (problem := item(element)) is not None), None)
    kind.says = "a list"
    return kind


def object_of(item: Kind) -> Kind:
    def kind(value):
        if not isinstance(value, dict):
            return f"must be an object, not {_shown(value)}"
        return next((f"entry {_shown(key)} {problem}" for key, element in value.items()
                     if (problem := item(element)) is not None), None)
    kind.says = "an object"
    return kind


def fields(**wanted: Kind) -> Kind:
    """An object whose named fields, where present, are of these kinds."""
    def kind(value):
        if not isinstance(value, dict):
            return f"must be an object, not {_shown(value)}"
        return next((f"field {_shown(name)} {problem}" for name, field_kind in wanted.items()
                     if name in value and (problem := field_kind(value[name])) is not None), None)
    kind.says = "an object"
    return kind


def required(kind: Kind, *names: str) -> Kind:
    """``kind``, and these fields must be there."""
    def checked(value):
        problem = kind(value)
        if problem is None:
            missing = [name for name in names if name not in value]
            problem = f"must have {_shown(missing[0])}" if missing else None
        return problem
    checked.says = kind.says
    return checked


PAIR_OF_STRINGS = simple(lambda v: isinstance(v, list) and len(v) == 2 and all(isinstance(p, str) for p in v),
                         "a pair of strings")


def STEP(value) -> str | None:
    """A normalizer or pre-tokenizer step: Split and Replace carry a {"Regex"|"String": ...} pattern, a
    Sequence its steps."""
    return _STEP_FIELDS(value)


STEP.says = "an object"
_STEP_FIELDS = fields(type=STRING, pattern=fields(Regex=STRING, String=STRING), pretokenizers=list_of(STEP),
                      normalizers=list_of(STEP))
# bos_token and friends: the text, or an AddedToken object with it in "content"
TOKEN_TEXT = optional(either(STRING, required(fields(content=STRING), "content")))
ROPE_SCALING = fields(rope_type=optional(STRING), type=optional(STRING), factor=optional(NUMBER),
                      low_freq_factor=optional(NUMBER), high_freq_factor=optional(NUMBER),
                      original_max_position_embeddings=optional(NUMBER), rope_theta=optional(NUMBER),
                      partial_rotary_factor=optional(NUMBER), long_factor=optional(list_of(NUMBER)),
                      short_factor=optional(list_of(NUMBER)), attention_factor=optional(NUMBER))

CONFIG = {
    "architectures": list_of(STRING),
    "model_type": optional(STRING),
    **dict.fromkeys(("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size"),
                    INT),
    **dict.fromkeys(("num_key_value_heads", "head_dim", "max_position_embeddings", "original_max_position_embeddings",
                     "sliding_window", "sliding_window_pattern"), optional(INT)),
    **dict.fromkeys(("rms_norm_eps", "layer_norm_eps", "norm_epsilon", "rope_theta", "rope_local_base_freq",
                     "partial_rotary_factor", "query_pre_attn_scalar", "attn_logit_softcapping",
                     "final_logit_softcapping", "embedding_multiplier", "residual_multiplier",
                     "attention_multiplier", "logits_scaling"), optional(NUMBER)),
    "rope_scaling": optional(ROPE_SCALING),
    # flat, or per attention kind (Gemma 3): {"full_attention": {...}, "sliding_attention": {...}}
    "rope_parameters": optional(fields(full_attention=ROPE_SCALING, sliding_attention=ROPE_SCALING,
                                       rope_type=optional(STRING), rope_theta=optional(NUMBER),
                                       factor=optional(NUMBER), partial_rotary_factor=optional(NUMBER))),
    "layer_types": optional(list_of(STRING)),
    **dict.fromkeys(("tie_word_embeddings", "use_bias", "attention_bias", "mlp_bias"), optional(BOOL)),
    **dict.fromkeys(("bos_token_id", "pad_token_id"), optional(TOKEN_ID)),
    "eos_token_id": optional(either(TOKEN_ID, list_of(TOKEN_ID))),
}
CONFIG["text_config"] = optional(fields(**CONFIG))  # the language model's keys in a multimodal config (Gemma 3)
TOKENIZER = {
    "model": fields(type=optional(STRING), vocab=object_of(TOKEN_ID), merges=list_of(either(STRING, PAIR_OF_STRINGS)),
                    byte_fallback=optional(BOOL), unk_token=optional(STRING)),
    "added_tokens": list_of(required(fields(id=TOKEN_ID, content=STRING, special=BOOL), "id", "content")),
    **dict.fromkeys(("normalizer", "pre_tokenizer"), optional(STEP)),
    **dict.fromkeys(("post_processor", "decoder"), optional(OBJECT)),
}
TOKENIZER_CONFIG = {
    "chat_template": optional(either(STRING, list_of(required(fields(name=STRING, template=STRING), "template")))),
    **dict.fromkeys(("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"),
                    TOKEN_TEXT),
    **dict.fromkeys(("add_bos_token", "add_eos_token", "add_prefix_space"), optional(BOOL)),
    "added_tokens_decoder": object_of(required(fields(content=STRING, special=BOOL), "content")),
}


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AssistantError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise AssistantError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(data, dict):
        raise AssistantError(f"{path}: expected a JSON object")
    return data


def read_config(path: Path) -> dict:
    config = read_json(path)
    _check(config, CONFIG, path)
    for scope in (config, config.get("text_config") or {}):
        if scope.get("vocab_size", 0) > MAX_VOCAB:
            raise AssistantError(f"{path}: vocab_size {scope['vocab_size']} is not a real vocabulary's size "
                                 f"(at most {MAX_VOCAB})")
    return config


def check_tokenizer_files(directory: Path) -> None:
    """tokenizer.json and tokenizer_config.json where present (their absence is reported where they are read)."""
    for name, schema in (("tokenizer.json", TOKENIZER), ("tokenizer_config.json", TOKENIZER_CONFIG)):
        path = Path(directory) / name
        if path.is_file():
            _check(read_json(path), schema, path)


def _check(data: dict, schema: dict[str, Kind], path: Path) -> None:
    for key, kind in schema.items():
        if key in data and (problem := kind(data[key])) is not None:
            raise AssistantError(f"{path}: \"{key}\" {problem}")
