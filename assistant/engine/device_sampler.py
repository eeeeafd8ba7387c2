"""Choices made where the logits are: a sampler inside llama.cpp's graph, through its experimental
backend-sampling hook, so that only what it leaves there comes back from the device that computed the output
(for a target on another machine: over the network) instead of rows of n_vocab floats.

llama.cpp runs a sampler chain's ``backend_apply`` while it builds the graph, once per output row; a subclass's
``build`` adds its operations over a view of that row's first ``n_shared`` logits (the vocabulary every level of
the chain shares) and says which results to copy back. A chain is initialised once by llama.cpp, so each
attachment makes a new one; a context holds one at a time.
"""

from __future__ import annotations

import ctypes

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


class SamplerData(ctypes.Structure):
    """llama.h's ``struct llama_sampler_data``: the graph tensors a backend sampler reads and sets (the ones left
    set are copied back)."""

    _fields_ = [("logits", _P), ("probs", _P), ("sampled", _P), ("candidates", _P)]


def ggml():
    """libggml-base with the graph-building functions the device samplers use."""
    base, _ = ggml_functions()
    for name, argtypes, restype in (("ggml_view_1d", [_P, _P, ctypes.c_int64, ctypes.c_size_t], _P),
                                    ("ggml_reshape_2d", [_P, _P, ctypes.c_int64, ctypes.c_int64], _P),
                                    ("ggml_argmax", [_P, _P], _P), ("ggml_top_k", [_P, _P, ctypes.c_int], _P),
                                    ("ggml_get_rows", [_P, _P, _P], _P), ("ggml_nelements", [_P], ctypes.c_int64)):
        function = getattr(base, name)
        function.argtypes, function.restype = argtypes, restype
    return base


class DeviceSampler:
    """Attaches to (and detaches from) one llama.cpp context the operations ``build`` adds to each output row."""

    name = b"assistant-device-sampler"

    def __init__(self, context_handle, n_shared: int):
        self._context = context_handle
        self._n_shared = n_shared
        self._ggml = ggml()
        self._lib = llama()
        self._chain = None
        # ctypes callbacks live as long as this object: llama.cpp keeps pointers to them
        self._interface = _SamplerInterface(
            _NAME(lambda sampler: self.name), _ACCEPT(0), _APPLY(lambda sampler, candidates: None),
            _ONE(0), _CLONE(0), _ONE(0), _BACKEND_INIT(lambda sampler, buffer_type, outputs: True),
            _BACKEND_GRAPH(0), _BACKEND_GRAPH(self._apply), _ONE(0), _ONE(0), _COPY_STATE(0))

    @property
    def attached(self) -> bool:
        return self._chain is not None

    def attach(self) -> bool:
        """Put the operations into the context's graph; False where llama.cpp refuses them."""
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

    def _apply(self, sampler, graph_context, graph, data_address) -> None:
        data = SamplerData.from_address(data_address)
        count = min(self._n_shared, self._ggml.ggml_nelements(data.logits))
        self.build(graph_context, data, self._ggml.ggml_view_1d(graph_context, data.logits, count, 0), count)

    def build(self, graph_context, data: SamplerData, shared, count: int) -> None:
        """Add this sampler's operations over ``shared`` (a row's first ``count`` logits) and set in ``data`` what
        comes back; ``data.logits`` left set would copy the whole row."""
        raise NotImplementedError
