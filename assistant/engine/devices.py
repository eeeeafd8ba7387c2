"""A remote machine's ``ggml-rpc-server`` as a place to load a model (its weights, KV cache and compute).

llama-cpp-python binds none of ggml's backend-device functions, so the few needed are declared here. The
remote device is made with the RPC registry's ``ggml_backend_rpc_add_server`` and handed to one model only
(``llama_model_params.devices``), never registered globally: the local levels keep to this CPU.

ggml aborts the whole process when an RPC connection fails, so the endpoint is first checked with a plain TCP
connection that can fail politely."""

from __future__ import annotations

import ctypes
import functools
import socket
from pathlib import Path

from assistant.errors import AssistantError

CONNECT_TIMEOUT = 5.0


@functools.lru_cache(maxsize=1)
def _ggml():
    import llama_cpp

    lib_dir = Path(llama_cpp.__file__).resolve().parent / "lib"
    base, ggml = ctypes.CDLL(str(lib_dir / "libggml-base.so")), ctypes.CDLL(str(lib_dir / "libggml.so"))
    for lib, name, argtypes, restype in (
        (ggml, "ggml_backend_reg_by_name", [ctypes.c_char_p], ctypes.c_void_p),
        (base, "ggml_backend_reg_get_proc_address", [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p),
        (base, "ggml_backend_reg_dev_count", [ctypes.c_void_p], ctypes.c_size_t),
        (base, "ggml_backend_reg_dev_get", [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_void_p),
        (base, "ggml_backend_dev_description", [ctypes.c_void_p], ctypes.c_char_p),
    ):
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, restype
    return base, ggml


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise AssistantError(f"{endpoint!r}: an RPC endpoint is HOST:PORT, e.g. 127.0.0.1:50052")
    return host, int(port)


def rpc_device(endpoint: str):
    """The device served by ``ggml-rpc-server`` at HOST:PORT (a ``ggml_backend_dev_t``)."""
    host, port = split_endpoint(endpoint)
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as error:
        raise AssistantError(f"cannot reach the RPC server at {endpoint} ({error.strerror or error}): is "
                             "ggml-rpc-server running there?") from None
    base, ggml = _ggml()
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
    return (_ggml()[0].ggml_backend_dev_description(device) or b"").decode(errors="replace")
