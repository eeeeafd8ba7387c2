"""Hugging Face safetensors checkpoints -> GGUF (BF16 target, MXFP4 direct cast, Q8_0, F16).

``convert`` is imported on first use: commands that only need a small part of the package (the progress bar
while a model loads) do not pay for gguf-py and every architecture at start-up.
"""

__all__ = ["check_metadata", "convert"]


def __getattr__(name):
    if name in __all__:
        from converters import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'converters' has no attribute {name!r}")
