"""Checks that every level speaks the target's vocabulary: same token text for every shared id.

Padded vocabularies (152064 vs 151936 ids) are fine when the extra ids are unused padding; the chain
then works over the shared range only. A draft with a vocabulary of its own, cut from the target's
(drafts/vocabulary.py), is checked token by token against the target tokens it stands for.
"""

from __future__ import annotations

from assistant.errors import AssistantError

_ATTR_UNUSED = 1 << 1  # llama_token_attr: LLAMA_TOKEN_ATTR_UNUSED
TOKENS_KEY = "tokenizer.ggml.tokens"


def shared_vocab_size(models) -> int:
    """The id range all models share; raises AssistantError naming the two files that disagree. Files whose
    token lists are byte for byte the same (a target and its MXFP4 copy) are not compared token by token."""
    if _same_token_lists(models):
        return models[0].n_vocab
    target = models[0]
    for model in models[1:]:
        if getattr(model, "target_ids", None) is not None:
            _check_own_vocabulary(model, target)
    shared = min(model.n_vocab for model in models)
    full = [model for model in models[1:] if getattr(model, "target_ids", None) is None]
    target_texts = [target.token_text(token) for token in range(shared)] if full else []
    for model in full:
        for token in range(shared):
            text = model.token_text(token)
            if text != target_texts[token]:
                raise AssistantError(
                    f"{model.path}: vocabulary differs from the target {target.path.name} at token {token} "
                    f"({_show(text)} vs {_show(target_texts[token])}; {model.architecture}, {model.n_vocab} tokens vs "
                    f"{target.architecture}, {target.n_vocab}): a draft must use the target's tokenizer"
                )
    for model in [target, *full]:
        extra = [token for token in range(shared, model.n_vocab) if not _unused(model, token)]
        if extra:
            raise AssistantError(
                f"{model.path}: has {len(extra)} real tokens beyond the {shared} ids the other levels know "
                f"(first: id {extra[0]} {_show(model.token_text(extra[0]))}): a draft must use the target's tokenizer"
            )
    return shared


def _check_own_vocabulary(model, target) -> None:
    """A draft with a vocabulary of its own (cut from the target's): each of its tokens is the target's token
    it stands for, and it speaks the target's ids."""
    if model.n_vocab != target.n_vocab:
        raise AssistantError(f"{model.path}: its vocabulary was cut from one of {model.n_vocab} tokens, the target "
                             f"{target.path.name} has {target.n_vocab}: a draft must use the target's tokenizer")
    for own, token in enumerate(model.target_ids):
        if token >= 0 and model.token_text(own) != target.token_text(int(token)):
            raise AssistantError(
                f"{model.path}: its token {own} ({_show(model.token_text(own))}) stands for the target's token "
                f"{token}, which is {_show(target.token_text(int(token)))} in {target.path.name}: a draft must "
                "use the target's tokenizer")


def _same_token_lists(models) -> bool:
    from assistant.engine.gguf_header import read_header

    try:
        digests = {read_header(model.path).array_digests.get(TOKENS_KEY) for model in models}
    except (AssistantError, AttributeError, TypeError):  # a remote model's stand-in, a file gone since
        return False
    return len(digests) == 1 and None not in digests and len({model.n_vocab for model in models}) == 1


def _unused(model, token: int) -> bool:
    return bool(model._lib.llama_vocab_get_attr(model.vocab, token) & _ATTR_UNUSED)


def _show(text: bytes) -> str:
    return repr(text.decode("utf-8", errors="replace"))
