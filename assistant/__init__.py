"""assistant: a local, offline coding assistant running multi-level speculative decoding on the CPU."""

import os

# numpy's OpenBLAS starts a worker per core that spins after each call; every core belongs to llama.cpp's
# threads here, and we never need a threaded BLAS. Effective when assistant is imported before numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
