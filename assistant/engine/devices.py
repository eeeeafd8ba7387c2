"""ggml's backends and devices, which llama-cpp-python does not bind: the CPU variant in use (our llama_cpp loads
the best of its backend modules when imported; ASSISTANT_CPU_VARIANT swaps in another), and a remote
machine's ``ggml-rpc-server`` as a place to load a model (its weights, KV cache and compute).

The few functions needed are declared here. The remote device is made with the RPC registry's
``ggml_backend_rpc_add_server`` and handed to one model only (``llama_model_params.devices``), never
registered globally: the local levels keep to this CPU.

ggml aborts the whole process when an RPC connection fails, so the remote model is driven from a worker
process (engine/remote.py), which first checks the endpoint with a handshake of its own."""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

from assistant.errors import AssistantError

CPU_LIBRARY_PREFIX = "libggml-cpu"
VARIANT_VARIABLE = "ASSISTANT_CPU_VARIANT"


def lib_dir() -> Path:
    """llama_cpp/lib: llama.cpp's libraries and, in the portable build, its backend modules."""
    import llama_cpp

    return Path(llama_cpp.__file__).resolve().parent / "lib"


def _loaded(stem: str) -> ctypes.CDLL:
    """The copy of ``stem`` that libllama runs with. A wheel holds each library as separate files (libggml.so,
    .so.0, .so.0.25.3), and opening one by path loads a second copy with a backend registry of its own, so
    the one already loaded is asked for by its soname."""
    for path in sorted(lib_dir().glob(f"{stem}.so.*"), key=lambda path: len(path.name)):
        try:
            return ctypes.CDLL(path.name, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
    raise AssistantError(f"{stem} from {lib_dir()} is not loaded: is llama_cpp our build?")


@functools.lru_cache(maxsize=1)
def _ggml():
    base, ggml = _loaded("libggml-base"), _loaded("libggml")
    for lib, name, argtypes, restype in (
        (ggml, "ggml_backend_load", [ctypes.c_char_p], ctypes.c_void_p),
        (ggml, "ggml_backend_unload", [ctypes.c_void_p], None),
        (ggml, "ggml_backend_reg_by_name", [ctypes.c_char_p], ctypes.c_void_p),
        (base, "ggml_backend_reg_get_proc_address", [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p),
        (base, "ggml_backend_reg_dev_count", [ctypes.c_void_p], ctypes.c_size_t),
        (base, "ggml_backend_reg_dev_get", [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_void_p),
        (base, "ggml_backend_dev_description", [ctypes.c_void_p], ctypes.c_char_p),
    ):
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, restype
    return base, ggml


def load_backends() -> None:
    """Check that importing llama_cpp loaded a CPU backend (it loads the best variant for this CPU, and RPC,
    from llama_cpp/lib), and swap in the variant ASSISTANT_CPU_VARIANT names before llama.cpp starts."""
    _, ggml = _ggml()
    variant = forced_variant()
    if variant:
        _use_variant(ggml, variant)
    if not ggml.ggml_backend_reg_by_name(b"CPU"):
        raise AssistantError(f"no llama.cpp CPU backend in {lib_dir()} loads on this CPU (reinstall assistant)")


def forced_variant() -> str | None:
    """The llama.cpp CPU variant named by ASSISTANT_CPU_VARIANT, e.g. haswell: a lesser CPU's code on this one
    (its stock kernels, and ours as that variant builds them), to measure what an AVX2-only machine runs."""
    return os.environ.get(VARIANT_VARIABLE) or None


def _use_variant(ggml, variant: str) -> None:
    if not cpu_variants():
        raise AssistantError(f"{VARIANT_VARIABLE}={variant}: this build has its CPU backend linked in (the native "
                             "flavour); only the portable build has variants to choose from")
    library = lib_dir() / f"{CPU_LIBRARY_PREFIX}-{variant}.so"
    if not library.exists():
        raise AssistantError(f"{VARIANT_VARIABLE}={variant}: no such llama.cpp CPU variant (installed: "
                             f"{', '.join(cpu_variants())})")
    loaded = ggml.ggml_backend_reg_by_name(b"CPU")
    if loaded and _library_holding(loaded) == library.resolve():
        return
    if loaded:  # nothing runs on it yet: llama.cpp has not started
        ggml.ggml_backend_unload(loaded)
    if not ggml.ggml_backend_load(os.fsencode(library)):
        raise AssistantError(f"{VARIANT_VARIABLE}={variant}: {library.name} does not load on this CPU")


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def cpu_backend_library() -> Path:
    """The file the CPU backend in use was loaded from, e.g. ``.../libggml-cpu-haswell.so``."""
    from assistant.engine.backend import llama

    llama()
    return _library_holding(_ggml()[1].ggml_backend_reg_by_name(b"CPU"))


def _library_holding(address) -> Path:
    """The shared library an address lies in (a backend's registry entry lives in its library), by dladdr."""
    try:
        dladdr = ctypes.CDLL(None).dladdr
    except AttributeError:  # glibc before 2.34 keeps it in libdl
        dladdr = ctypes.CDLL("libdl.so.2").dladdr
    info = _DlInfo()
    if not address or not dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        raise LookupError("cannot tell which library holds llama.cpp's CPU backend")
    return Path(os.fsdecode(info.dli_fname)).resolve()


def cpu_variant(library: Path) -> str:
    """"haswell" for libggml-cpu-haswell.so; "" for the one libggml-cpu.so of a build without variants."""
    name = library.name.split(".so")[0]
    return name[len(CPU_LIBRARY_PREFIX) + 1:] if name.startswith(CPU_LIBRARY_PREFIX + "-") else ""


def cpu_variants() -> list[str]:
    """The CPU variants installed beside llama.cpp (none for a build without them)."""
    return sorted(filter(None, (cpu_variant(path) for path in lib_dir().glob(f"{CPU_LIBRARY_PREFIX}-*.so"))))


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
    from assistant.engine.backend import llama

    llama()  # the RPC backend is a module in the portable build
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
