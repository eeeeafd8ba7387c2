"""Loading a model whose weights our kernels read where its file is mapped (ASSISTANT_WEIGHTS=mapped).

The file is read into the page cache in 2 MB pages before llama.cpp maps it. Every token streams the mapping:
on 4 KB pages that is a page walk every 4 KB. Linux keeps a file in 2 MB pages (and maps them whole) only when
they were read into the cache through a mapping that asked for huge pages; llama.cpp's own mapping asks for
nothing. So the file is read here first, through such a mapping, and llama.cpp then maps the same pages whole.
A file already cached whole is left as it is (reading it again would only cost time); so are pages cached
already, and nothing changes where Linux cannot do this.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
from pathlib import Path

from assistant.engine.gguf_header import read_header

HUGE_PAGE = 2 << 20
MADV_POPULATE_READ = 22  # Linux 5.14; the mmap module names it only from Python 3.13 on
# What our kernels read in the mapping (BF16, MXFP4) and what llama.cpp reads there itself (vectors).
READ_IN_PLACE = frozenset({"BF16", "MXFP4", "F32", "F16"})


def choose_for(paths) -> None:
    """Where the user has not set ASSISTANT_WEIGHTS: "mapped" when the model files and a copy of them would not
    fit in the memory available together, else "packed". A copy is rebuilt at every start, so where both do not
    fit, the files cannot stay in the page cache between starts and every start reads them from the disk again
    (notes/loading.md); where they fit, the copy's faster prompts and verification batches are worth its few
    seconds. The native library reads the setting once, when llama.cpp
    starts; after that nothing changes here."""
    if "ASSISTANT_WEIGHTS" not in os.environ and "llama_cpp" not in sys.modules:
        os.environ["ASSISTANT_WEIGHTS"] = default_mode(paths)


def default_mode(paths) -> str:
    """"mapped" or "packed" for model files ``paths``, as choose_for decides it."""
    from assistant.engine.memory import available_memory

    files = sum(Path(path).stat().st_size for path in paths if Path(path).is_file())  # a missing one: said later
    return "mapped" if 2 * files > available_memory() else "packed"


def weights_read_where_mapped() -> bool:
    """Whether our kernels read weights in the file's mapping (the native library's own reading of the setting)."""
    return os.environ.get("ASSISTANT_WEIGHTS", "packed") == "mapped"


def without_extra_buffers(path: str | Path) -> bool:
    """Whether llama.cpp's extra buffer types should hold none of this file's weights. They would copy MXFP4
    matrices into ggml's own repacked layout (ours steps aside for them in this mode); for a file of other
    types (Q8_0, K-quants) ours still packs those, so they stay on."""
    return {tensor.type_name for tensor in read_header(path).tensors} <= READ_IN_PLACE


def _libc():
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return libc


def cached_whole(libc, address: int, size: int) -> bool:
    """Whether a page in every 2 MB of the mapping at ``address`` is in the page cache (a sample: asking for
    every 4 KB page of a large file takes far longer)."""
    page = ctypes.c_ubyte()
    for offset in [*range(0, size, HUGE_PAGE), size - 1]:
        start = offset // mmap.PAGESIZE * mmap.PAGESIZE
        if libc.mincore(address + start, mmap.PAGESIZE, ctypes.byref(page)) != 0 or not page.value & 1:
            return False
    return True


def read_in_huge_pages(path: str | Path) -> bool:
    """Reads ``path`` into the page cache through a mapping that asks for 2 MB pages, unless it is cached whole
    already; False where it could not (not Linux, an older kernel, THP off)."""
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    libc = _libc()
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return False
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, file.fileno(), 0)
        if address in (None, ctypes.c_void_p(-1).value):
            return False
        try:
            if cached_whole(libc, address, size):
                return True
            return (libc.madvise(address, size, mmap.MADV_HUGEPAGE) == 0 and
                    libc.madvise(address, size, MADV_POPULATE_READ) == 0)
        finally:
            libc.munmap(address, size)


def prepare_load(params, path: str | Path) -> None:
    """Before llama.cpp loads ``path`` on this CPU with model parameters ``params``: where weights are read in
    the mapping, the extra buffer types left off when they would copy, and the file read in huge pages."""
    if weights_read_where_mapped():
        params.use_extra_bufts = not without_extra_buffers(path)
        read_in_huge_pages(path)
