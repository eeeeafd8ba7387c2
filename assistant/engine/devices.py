"""A remote machine's ``ggml-rpc-server`` as a place to load a model (its weights, KV cache and compute): the
device llama-cpp-python does not bind.

The remote device is made with the RPC registry's ``ggml_backend_rpc_add_server`` and handed to one model only
(``llama_model_params.devices``), never registered globally: the local levels keep to this CPU.

ggml aborts the whole process when an RPC connection fails, so the remote model is driven from a worker
process (engine/remote.py), which first checks the endpoint with a handshake of its own."""

from __future__ import annotations

import ctypes

from assistant.engine.backend import ggml_functions, llama
from assistant.errors import AssistantError


def split_endpoints(text: str) -> tuple[list[str], list[float] | None]:
    """``HOST:PORT[=SHARE],...``: the servers that share a target's layers, and the shares given (None: all
    left to llama.cpp, which divides the layers by each server's free memory)."""
    endpoints, shares = [], []
    for item in text.split(","):
        endpoint, _, share = item.strip().partition("=")
        split_endpoint(endpoint)
        try:
            value = float(share) if share else None
        except ValueError:
            value = -1.0
        if value is not None and not 0 < value < float("inf"):
            raise AssistantError(f"{item.strip()!r}: a server's share of the layers is a positive number, "
                                 "e.g. 127.0.0.1:50052=2")
        endpoints.append(endpoint)
        shares.append(value)
    if len(set(endpoints)) < len(endpoints):
        raise AssistantError(f"{text!r}: each RPC server can be named once")
    if all(share is None for share in shares):
        return endpoints, None
    if any(share is None for share in shares):
        raise AssistantError(f"{text!r}: give every server a share of the layers, or none")
    return endpoints, shares


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise AssistantError(f"{endpoint!r}: an RPC endpoint is HOST:PORT, e.g. 127.0.0.1:50052")
    return host, int(port)


def rpc_device(endpoint: str):
    """The device served by ``ggml-rpc-server`` at HOST:PORT (a ``ggml_backend_dev_t``). ggml aborts the
    process if the server cannot be reached: call it where that is survivable (engine/remote.py's worker,
    after ``remote.probe``)."""
    split_endpoint(endpoint)
    llama()  # the RPC backend is a module in the portable build
    base, ggml = ggml_functions()
    registry = ggml.ggml_backend_reg_by_name(b"RPC")
    if not registry:
        raise AssistantError("this build of llama.cpp has no RPC backend (rebuild with native/build.py)")
    address = base.ggml_backend_reg_get_proc_address(registry, b"ggml_backend_rpc_add_server")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(address)
    server = add_server(endpoint.encode())
    if not server or base.ggml_backend_reg_dev_count(server) < 1:
        raise AssistantError(f"the RPC server at {endpoint} offers no device")
    return base.ggml_backend_reg_dev_get(server, 0)


def describe(device) -> str:
    return (ggml_functions()[0].ggml_backend_dev_description(device) or b"").decode(errors="replace")
