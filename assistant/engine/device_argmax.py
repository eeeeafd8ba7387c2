"""Greedy choices made where the logits are: an argmax inside llama.cpp's graph, through its backend-sampling
hook, so that a target on another machine sends back one token id per row instead of a row of n_vocab floats.

llama.cpp runs a sampler chain's ``backend_apply`` while it builds the graph, on the device that computes the
output; ours adds a view of the first ``n_shared`` logits (the vocabulary every level of the chain shares, as
the coordinator's own argmax reads them) and an argmax of it, and leaves no logits to copy back. ggml's argmax
keeps the first of equal maxima, as numpy's does, so the choices are the ones the coordinator would make.
A chain is initialised once by llama.cpp, so each attachment makes a new one.
"""

from __future__ import annotations

import ctypes

import numpy as np

from assistant.engine.backend import ggml_functions, llama

_P = ctypes.c_void_p
_NAME = ctypes.CFUNCTYPE(ctypes.c_char_p, _P)
_ACCEPT = ctypes.CFUNCTYPE(None, _P, ctypes.c_int32)
_APPLY = ctypes.CFUNCTYPE(None, _P, _P)
_ONE = ctypes.CFUNCTYPE(None, _P)  # reset, free, backend_set_input, backend_reset
_CLONE = ctypes.CFUNCTYPE(_P, _P)
_BACKEND_INIT = ctypes.CFUNCTYPE(ctypes.c_bool, _P, _P, ctypes.c_uint32)
_BACKEND_GRAPH = ctypes.CFUNCTYPE(None, _P, _P, _P, _P)  # backend_accept, backend_apply
_COPY_STATE = ctypes.CFUNCTYPE(None, _P, _P)


class _SamplerInterface(ctypes.Structure):
    """llama.h's ``struct llama_sampler_i`` (the bindings keep it opaque)."""

    _fields_ = [("name", _NAME), ("accept", _ACCEPT), ("apply", _APPLY), ("reset", _ONE), ("clone", _CLONE),
                ("free", _ONE), ("backend_init", _BACKEND_INIT), ("backend_accept", _BACKEND_GRAPH),
                ("backend_apply", _BACKEND_GRAPH), ("backend_set_input", _ONE), ("backend_reset", _ONE),
                ("copy_state", _COPY_STATE)]


class _SamplerData(ctypes.Structure):
    """llama.h's ``struct llama_sampler_data``: the graph tensors a backend sampler reads and sets."""

    _fields_ = [("logits", _P), ("probs", _P), ("sampled", _P), ("candidates", _P)]


def _ggml():
    base, _ = ggml_functions()
    for name, argtypes, restype in (("ggml_view_1d", [_P, _P, ctypes.c_int64, ctypes.c_size_t], _P),
                                    ("ggml_argmax", [_P, _P], _P), ("ggml_nelements", [_P], ctypes.c_int64)):
        function = getattr(base, name)
        function.argtypes, function.restype = argtypes, restype
    return base


class DeviceArgmax:
    """Attaches to (and detaches from) one llama.cpp context an argmax over the first ``n_shared`` logits."""

    def __init__(self, context_handle, n_shared: int):
        self._context = context_handle
        self._n_shared = n_shared
        self._ggml = _ggml()
        self._lib = llama()
        self._chain = None
        # ctypes callbacks live as long as this object: llama.cpp keeps pointers to them
        self._interface = _SamplerInterface(
            _NAME(lambda sampler: b"assistant-argmax"), _ACCEPT(0), _APPLY(lambda sampler, candidates: None),
            _ONE(0), _CLONE(0), _ONE(0), _BACKEND_INIT(lambda sampler, buffer_type, outputs: True),
            _BACKEND_GRAPH(0), _BACKEND_GRAPH(self._build), _ONE(0), _ONE(0), _COPY_STATE(0))

    @property
    def attached(self) -> bool:
        return self._chain is not None

    def attach(self) -> bool:
        """Put the argmax into the context's graph; False where llama.cpp refuses it."""
        if self._chain is not None:
            return True
        lib = self._lib
        init = lib.llama_cpp._lib.llama_sampler_init
        init.argtypes, init.restype = [ctypes.POINTER(_SamplerInterface), _P], ctypes.POINTER(lib.llama_sampler)
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        lib.llama_sampler_chain_add(chain, init(ctypes.byref(self._interface), None))
        if not lib.llama_set_sampler(self._context, 0, chain):
            lib.llama_sampler_free(chain)
            return False
        self._chain = chain
        return True

    def detach(self) -> None:
        if self._chain is not None:
            self._lib.llama_set_sampler(self._context, 0, None)
            self._lib.llama_sampler_free(self._chain)
            self._chain = None

    def choices(self, rows: int) -> np.ndarray:
        """The argmax of each of the last decode's final ``rows`` outputs."""
        choose = self._lib.llama_get_sampled_token_ith
        return np.array([choose(self._context, row - rows) for row in range(rows)], dtype=np.int32)

    def _build(self, sampler, graph_context, graph, data_address) -> None:
        data = _SamplerData.from_address(data_address)
        count = min(self._n_shared, self._ggml.ggml_nelements(data.logits))
        shared = self._ggml.ggml_view_1d(graph_context, data.logits, count, 0)
        data.sampled = self._ggml.ggml_argmax(graph_context, shared)
        data.logits = None  # nothing else to copy back
