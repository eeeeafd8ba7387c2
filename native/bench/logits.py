"""Logits and greedy tokens of a GGUF through the installed llama_cpp, for A/B checks of our kernels.

Kernel choice is read from ASSISTANT_*_KERNEL once when ggml-cpu starts, so each setting needs its own
process: ``python -m native.bench.logits MODEL --tokens 1,2,3 --out logits.npy [--single] [--greedy 32]``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import numpy as np


def kernels_description() -> str:
    """What our kernels say of themselves ("" for a build without them)."""
    from assistant.engine.backend import kernel_description

    try:
        return kernel_description()
    except LookupError:
        return ""


class Model:
    def __init__(self, path: Path, threads: int = 1, n_ctx: int = 512):
        from assistant.engine.backend import llama
        from assistant.engine.mapped_weights import prepare_load

        L = llama()  # loads the backends (modules in the portable build) and initialises llama.cpp
        self.L = L
        self._quiet = L.llama_log_callback(lambda level, text, data: None)  # kept alive as long as the model
        L.llama_log_set(self._quiet, ctypes.c_void_p())
        model_params = L.llama_model_default_params()
        prepare_load(model_params, path)
        self.model = L.llama_model_load_from_file(str(path).encode(), model_params)
        if not self.model:
            raise SystemExit(f"error: {path}: llama.cpp could not load it")
        params = L.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_ctx, n_ctx
        params.n_threads = params.n_threads_batch = threads
        self.ctx = L.llama_init_from_model(self.model, params)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.batch = L.llama_batch_init(n_ctx, 0, 1)
        self.n_past = 0

    def decode(self, tokens: list[int]) -> np.ndarray:
        """Evaluate tokens as one batch; the logits of every one of them, (len(tokens), n_vocab)."""
        b = self.batch
        b.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, self.n_past + i, 1, True
            b.seq_id[i][0] = 0
        if self.L.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        self.n_past += len(tokens)
        out = self.L.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(out, shape=(len(tokens), self.n_vocab)).copy()

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        logits = self.decode(prompt)[-1]
        produced = []
        for _ in range(n):
            produced.append(int(np.argmax(logits)))
            logits = self.decode(produced[-1:])[0]
        return produced


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--tokens", required=True, help="comma-separated prompt token ids")
    parser.add_argument("--out", type=Path, help="write the prompt's logits here (.npy)")
    parser.add_argument("--single", action="store_true", help="decode the prompt one token at a time")
    parser.add_argument("--greedy", type=int, default=0, help="then generate this many greedy tokens")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    tokens = [int(t) for t in args.tokens.split(",")]
    model = Model(args.model, threads=args.threads)
    if args.out:
        logits = (np.concatenate([model.decode([t]) for t in tokens]) if args.single else model.decode(tokens))
        np.save(args.out, logits)
        model.L.llama_memory_clear(model.L.llama_get_memory(model.ctx), True)
        model.n_past = 0
    report = {"kernels": kernels_description()}
    if args.greedy:
        report["greedy"] = model.greedy(tokens, args.greedy)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
