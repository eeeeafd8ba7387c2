"""The Llama family: Llama 2 / 3.x, SmolLM2, CodeLlama, DeepSeek-Coder (all LlamaForCausalLM) and Mistral.

llama.cpp's LLAMA graph uses ggml's NORM rope, which rotates adjacent pairs, so q and k rows are
reordered from Hugging Face's half-split layout. Biases are optional on attention (`attention_bias`)
and on the feed-forward (`mlp_bias`); Llama 3.1+ scaling becomes a frequency factor tensor.
"""

from __future__ import annotations

import gguf

from converters.architectures.base import Architecture

T = gguf.MODEL_TENSOR


class Llama(Architecture):
    gguf_arch = gguf.MODEL_ARCH.LLAMA
    permute_qk = True
    rope_scalings = ("linear", "yarn", "llama3")
    biases = frozenset({T.ATTN_Q, T.ATTN_K, T.ATTN_V, T.ATTN_OUT, T.FFN_GATE, T.FFN_UP, T.FFN_DOWN})


ARCHITECTURES = {"LlamaForCausalLM": Llama, "MistralForCausalLM": Llama}
