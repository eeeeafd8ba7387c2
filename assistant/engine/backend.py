"""llama.cpp, started once on its CPU backend, and what that backend is: the ggml functions llama-cpp-python does
not bind, the CPU variant and library in use, what our kernels run there. Its log is kept off the terminal.

Everything that calls into llama.cpp goes through ``llama()``: importing llama_cpp loads the best CPU backend
for this CPU, and ASSISTANT_CPU_VARIANT may swap it for another only before llama.cpp starts.

llama.cpp prints hundreds of lines per model load to stderr; a chat UI and `--json` output must not
carry them. Error lines are kept (``recent_errors``) so our own one-line messages can quote them;
set ASSISTANT_LLAMA_LOG=1 to see everything.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import os
from pathlib import Path

from assistant.errors import AssistantError

_ready = False
_log_callback = None  # kept alive: llama.cpp holds a pointer to it
_LOG_LEVEL_ERROR = 4  # ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
recent_errors: collections.deque[str] = collections.deque(maxlen=8)


CHOICES_VARIABLE = "ASSISTANT_KERNEL_CHOICES"


def keep_kernel_choices() -> None:
    """Name the file our kernels keep their measured choices in (assistant/cpu.py), unless one is named: called
    before llama_cpp is imported, as its CPU backend measures when it loads. Where the cache cannot be written,
    each process measures for itself."""
    if os.environ.get(CHOICES_VARIABLE) is not None:
        return
    from assistant.cpu import kernel_choices_path

    path = kernel_choices_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    os.environ[CHOICES_VARIABLE] = str(path)  # programs we start (llama-bench) take the same choices


def llama():
    """The llama_cpp bindings module, with the backend initialised."""
    global _ready, _log_callback
    keep_kernel_choices()
    import llama_cpp

    if not _ready:
        if not os.environ.get("ASSISTANT_LLAMA_LOG"):
            _log_callback = llama_cpp.llama_log_callback(_log_errors_only)
            llama_cpp.llama_log_set(_log_callback, None)
        _settle_cpu_backend()
        llama_cpp.llama_backend_init()
        _ready = True
    return llama_cpp


def _log_errors_only(level, text, _user_data):
    if level == _LOG_LEVEL_ERROR and text:
        line = text.decode("utf-8", errors="replace").strip()
        if line:
            recent_errors.append(line)


def last_error() -> str:
    """The first llama.cpp error line since the last call (the most specific one), or ""."""
    line = recent_errors[0] if recent_errors else ""
    recent_errors.clear()
    return line


CPU_LIBRARY_PREFIX = "libggml-cpu"
VARIANT_VARIABLE = "ASSISTANT_CPU_VARIANT"


def lib_dir() -> Path:
    """llama_cpp/lib: llama.cpp's libraries and, in the portable build, its backend modules."""
    keep_kernel_choices()
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
def ggml_functions():
    """(libggml-base, libggml), the copies libllama runs with, with the functions we call declared."""
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


def _settle_cpu_backend() -> None:
    """Check that importing llama_cpp loaded a CPU backend (it loads the best variant for this CPU, and RPC,
    from llama_cpp/lib), and swap in the variant ASSISTANT_CPU_VARIANT names before llama.cpp starts."""
    _, ggml = ggml_functions()
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
    llama()
    return _library_holding(ggml_functions()[1].ggml_backend_reg_by_name(b"CPU"))


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


def kernel_description() -> str:
    """What the patched CPU backend in use says of our kernels, e.g. "mxfp4=avx2 bf16=avx2".

    Raises LookupError when the installed llama-cpp-python is not our build.
    """
    library = cpu_backend_library()
    try:
        describe = ctypes.CDLL(str(library)).assistant_kernels_describe  # the loaded copy: same file
    except AttributeError:
        raise LookupError(f"{library} does not export assistant_kernels_describe") from None
    describe.restype = ctypes.c_char_p
    return describe().decode()


def llama_cpu_variant() -> str:
    """llama.cpp's CPU variant in use ("haswell"), or "native" for the -march=native build: speed figures
    name it beside our kernels, so that the portable and native builds can be compared."""
    return cpu_variant(cpu_backend_library()) or "native"


class NativeHandle:
    """Frees a llama.cpp object with ``close()`` on ``with`` exit or garbage collection, whichever is first."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
