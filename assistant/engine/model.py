"""One GGUF file loaded once: weights, vocabulary, chat template. Contexts are made from it."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from assistant.engine.backend import NativeHandle, last_error, llama
from assistant.engine.gguf_header import check_gguf_file, read_header
from assistant.engine.mapped_weights import prepare_load
from assistant.errors import AssistantError

# A draft with a vocabulary of its own, cut from its target's (drafts/vocabulary.py): per own token the target's
# id (-1 for a stand-in), and the target's vocabulary size.
TARGET_IDS_KEY = "assistant.draft.target_ids"
TARGET_VOCAB_KEY = "assistant.draft.target_vocab_size"


class Model(NativeHandle):
    """A loaded llama.cpp model and its vocabulary; close() frees it (also a context manager)."""

    def __init__(self, path: str | Path, device=None, vocab_only: bool = False, split=None, progress=None):
        """``device``: where weights, cache and compute go (``devices.rpc_device``), or a list of devices that
        share the layers (in proportion to ``split``, else as llama.cpp divides them: by free memory); None is
        this CPU. ``vocab_only``: the vocabulary and metadata without the weights (for a model that runs
        elsewhere). ``progress(fraction)`` is called as the weights load."""
        self.path = Path(path)
        self.device = device
        check_gguf_file(self.path)
        lib = llama()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        params.vocab_only = vocab_only
        if progress is not None:
            def report(fraction, _user_data):
                progress(fraction)
                return True

            self._progress = lib.llama_progress_callback(report)  # kept alive while llama.cpp may call it
            params.progress_callback = self._progress
        if device is not None:
            devices = list(device) if isinstance(device, (list, tuple)) else [device]
            self._devices = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)  # NULL-terminated; kept alive
            params.devices = ctypes.cast(self._devices, ctypes.c_void_p).value
            params.n_gpu_layers = -1  # every layer on those devices
            if split:
                self._split = (ctypes.c_float * lib.llama_max_devices())(*split)
                params.tensor_split = self._split
        if device is None and not vocab_only:
            prepare_load(params, self.path)
        last_error()
        handle = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not handle:
            reason = last_error() or "unsupported architecture or damaged file"
            raise AssistantError(f"{self.path}: llama.cpp could not load this GGUF ({reason})")
        self.handle = handle
        self.vocab = lib.llama_model_get_vocab(handle)
        self.n_own_vocab = lib.llama_vocab_n_tokens(self.vocab)  # its logits' width
        self.n_vocab = self.n_own_vocab  # the ids it speaks: the target's for a draft with a vocabulary of its own
        self.target_ids = None  # for such a draft: own token -> target id, -1 where none
        self.architecture = self.metadata("general.architecture") or "unknown"
        self._lib = lib
        self._pieces: dict[int, bytes] = {}
        header = read_header(self.path)
        if header.value(TARGET_VOCAB_KEY) is not None:
            ids = header.number_array(TARGET_IDS_KEY)
            self.target_ids = None if ids is None else ids.astype(np.int64)
            self.n_vocab = int(header.value(TARGET_VOCAB_KEY))
            if ids is None or ids.shape != (self.n_own_vocab,) or ids.max() >= self.n_vocab:
                self.close()
                raise AssistantError(f"{self.path}: its map to the target's vocabulary ({TARGET_IDS_KEY}) does "
                                     "not fit its own vocabulary")

    # --- metadata -------------------------------------------------------------------------------
    def metadata(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(256)
        size = llama().llama_model_meta_val_str(self.handle, key.encode(), buffer, len(buffer))
        if size < 0:
            return None
        if size >= len(buffer):
            buffer = ctypes.create_string_buffer(size + 1)
            llama().llama_model_meta_val_str(self.handle, key.encode(), buffer, len(buffer))
        return buffer.value.decode("utf-8", errors="replace")

    def attention_geometry(self) -> tuple:
        """What shapes the KV cache: two models with equal geometry can share a cache's contents."""
        arch = self.metadata("general.architecture")
        keys = ("block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
                "attention.key_length", "attention.value_length", "rope.freq_base", "rope.dimension_count")
        return (arch, *(self.metadata(f"{arch}.{key}") for key in keys))

    @property
    def chat_template(self) -> str | None:
        template = self._lib.llama_model_chat_template(self.handle, None)
        return template.decode("utf-8") if template else None

    @property
    def n_ctx_train(self) -> int:
        return self._lib.llama_model_n_ctx_train(self.handle)

    # --- vocabulary -----------------------------------------------------------------------------
    def is_end_of_generation(self, token: int) -> bool:
        return bool(self._lib.llama_vocab_is_eog(self.vocab, token))

    def token_text(self, token: int) -> bytes:
        """The vocabulary entry itself (as stored, e.g. with the BPE space marker), for comparing vocabularies; a
        draft with a vocabulary of its own takes its own ids here."""
        return self._lib.llama_vocab_get_text(self.vocab, token) or b""

    @property
    def bos_token(self) -> int:
        return self._lib.llama_vocab_bos(self.vocab)

    @property
    def eos_token(self) -> int:
        return self._lib.llama_vocab_eos(self.vocab)

    @property
    def fim_tokens(self) -> tuple[int, int, int] | None:
        """The fill-in-the-middle prefix, suffix and middle tokens, or None where the vocabulary lacks one
        (llama.cpp finds them by metadata or by their usual spellings, e.g. "<|fim_prefix|>")."""
        lib = self._lib
        tokens = (lib.llama_vocab_fim_pre(self.vocab), lib.llama_vocab_fim_suf(self.vocab),
                  lib.llama_vocab_fim_mid(self.vocab))
        return tokens if all(token >= 0 for token in tokens) else None

    def token_string(self, token: int) -> str:
        """A special token's text (e.g. "<|im_end|>"), for chat templates that name bos/eos."""
        return self.piece(token, special=True).decode("utf-8", errors="replace") if token >= 0 else ""

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text to token ids; ``parse_special`` turns "<|im_start|>" into its single token id."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        tokens = (ctypes.c_int32 * capacity)()
        count = self._lib.llama_tokenize(self.vocab, data, len(data), tokens, capacity, add_special, parse_special)
        if count < 0:
            capacity = -count
            tokens = (ctypes.c_int32 * capacity)()
            count = self._lib.llama_tokenize(self.vocab, data, len(data), tokens, capacity, add_special, parse_special)
        if count < 0:
            raise AssistantError(f"{self.path}: could not tokenize the prompt")
        return list(tokens[:count])

    def piece(self, token: int, special: bool = False) -> bytes:
        """The bytes one token contributes to the text; may be part of a UTF-8 character."""
        key = token if not special else -1 - token
        cached = self._pieces.get(key)
        if cached is None:
            buffer = ctypes.create_string_buffer(64)
            size = self._lib.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
            if size < 0:
                buffer = ctypes.create_string_buffer(-size)
                size = self._lib.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
            cached = buffer.raw[: max(size, 0)]
            self._pieces[key] = cached
        return cached

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(token) for token in tokens).decode("utf-8", errors="replace")

    # --- lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "handle", None):
            self._lib.llama_model_free(self.handle)
            self.handle = None

