"""assistant: a local, offline coding assistant running multi-level speculative decoding on the CPU."""

__version__ = "0.1.0"
