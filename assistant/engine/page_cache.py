"""A weights file read into the page cache in 2 MB pages before llama.cpp maps it.

Where our kernels read the weights in the file's own pages (ASSISTANT_BF16_WEIGHTS=mapped), every token
streams the mapping: on 4 KB pages that is a page walk every 4 KB. Linux keeps a file in 2 MB pages (and maps
them whole) only when they were read into the cache through a mapping that asked for huge pages; llama.cpp's own
mapping asks for nothing. So the file is read here first, through such a mapping, and llama.cpp then maps the
same pages whole. Pages already cached stay as they are; nothing changes where Linux cannot do this.
"""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

MADV_POPULATE_READ = 22  # Linux 5.14; the mmap module names it only from Python 3.13 on


def weights_read_where_mapped() -> bool:
    """Whether our kernels read BF16 weights in the file's mapping (the native library's own reading of it)."""
    return os.environ.get("ASSISTANT_BF16_WEIGHTS", "packed") == "mapped"


def read_in_huge_pages(path: str | Path) -> bool:
    """Reads ``path`` into the page cache through a mapping that asks for 2 MB pages; False where unsupported."""
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return False
        with mmap.mmap(file.fileno(), size, prot=mmap.PROT_READ) as view:
            try:
                view.madvise(mmap.MADV_HUGEPAGE)
                view.madvise(MADV_POPULATE_READ)
            except OSError:  # an older kernel, or THP off
                return False
    return True
