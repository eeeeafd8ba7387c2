"""What a model set needs in memory, what this machine has free, and how each file is best loaded.

A set that does not fit is refused before anything loads, in one line naming the sizes and the ways out, rather
than left to swap the machine to a standstill. The need is read from the GGUF headers alone: the weights as our
kernels or llama.cpp hold them, the KV cache for the context, and the compute buffers of a 512-token batch.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from assistant.diskspace import format_size
from assistant.engine.gguf_header import Header, read_header
from assistant.errors import AssistantError

UBATCH = 512  # tokens per evaluation step (engine/context.py): sizes the compute buffers
KV_BYTES = 2  # f16 keys and values
MIN_CTX = 512
DEFAULT_CTX = 4096
AVAILABLE_VARIABLE = "ASSISTANT_MEMORY_AVAILABLE"  # bytes (or "8G", "512M"): stands in for what Linux reports
RESERVE = 128 << 20  # the process itself: Python, the libraries, the screen


@dataclass(frozen=True)
class Need:
    """Bytes one model needs at a context size."""

    weights: int
    kv_cache: int
    compute: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute


def kv_bytes_per_token(header: Header) -> int:
    """Keys and values one token adds to the cache over every layer."""
    layers = int(header.arch_value("block_count", 0) or 0)
    heads = header.arch_value("attention.head_count", 1) or 1
    kv_heads = header.arch_value("attention.head_count_kv", heads)
    embedding = int(header.arch_value("embedding_length", 0) or 0)
    head_of = (lambda value, layer: value[layer] if isinstance(value, list) else value)
    total = 0
    for layer in range(layers):
        n_head = head_of(heads, layer) or 1
        n_kv = head_of(kv_heads, layer)
        key = int(header.arch_value("attention.key_length", embedding // n_head) or 0)
        value = int(header.arch_value("attention.value_length", key) or 0)
        total += int(n_kv) * (key + value) * KV_BYTES
    return total


def model_need(path: str | Path, n_ctx: int) -> Need:
    header = read_header(path)
    vocab = _vocab_size(header)
    embedding = int(header.arch_value("embedding_length", 0) or 0)
    feed_forward = header.arch_value("feed_forward_length", 4 * embedding)
    feed_forward = max(feed_forward) if isinstance(feed_forward, list) else int(feed_forward or 0)
    # the logits of a whole batch and its widest activations, in f32
    compute = UBATCH * 4 * (vocab + 2 * feed_forward + 4 * embedding)
    return Need(header.weight_bytes, kv_bytes_per_token(header) * n_ctx, compute)


def _vocab_size(header: Header) -> int:
    for tensor in header.tensors:
        if tensor.name == "token_embd.weight" and len(tensor.shape) >= 2:
            return int(tensor.shape[1])
    return int(header.arch_value("vocab_size", 32000) or 32000)


def set_need(paths, n_ctx: int) -> int:
    """Bytes of a whole set at ``n_ctx``, with the process's own reserve."""
    return sum(model_need(path, n_ctx).total for path in paths) + RESERVE


def available_memory() -> int:
    """Bytes this process may still take: Linux's MemAvailable, or less where a cgroup limit is lower."""
    forced = os.environ.get(AVAILABLE_VARIABLE)
    if forced:
        return parse_size(forced, AVAILABLE_VARIABLE)
    candidates = [_meminfo_available()]
    limit = cgroup_room()
    if limit is not None:
        candidates.append(limit)
    return min(candidate for candidate in candidates if candidate is not None)


def parse_size(text: str, what: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not match:
        raise AssistantError(f"{what}={text!r}: expected a size such as 8G, 512M or a number of bytes")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)


def _meminfo_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_room(root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")) -> int | None:
    """The memory left under this process's cgroup limits (v2, else v1; the tightest of the group and the groups
    above it), or None where no limit is set. Page cache the kernel can drop (inactive files) counts as free."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, group = parts
        if hierarchy == "0" and controllers == "":
            base, files = root, ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):
            base, files = root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        directory = base / group.strip("/")
        while True:
            room = _room(directory, *files)
            if room is not None:
                rooms.append(room)
            if directory == base or base not in directory.parents:
                break
            directory = directory.parent
    return min(rooms) if rooms else None


def _room(directory: Path, limit_file: str, usage_file: str, reclaimable_key: str) -> int | None:
    try:
        limit = (directory / limit_file).read_text().strip()
        usage = int((directory / usage_file).read_text().strip())
    except (OSError, ValueError):
        return None
    if not limit.isdigit() or int(limit) >= 1 << 60:  # "max" (v2) or v1's page-rounded 2^63
        return None
    reclaimable = 0
    try:
        for line in (directory / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == reclaimable_key:
                reclaimable = int(value)
    except (OSError, ValueError):
        pass
    return max(0, int(limit) - usage + reclaimable)


def fit_context(paths, n_ctx: int | None) -> int:
    """The context size to load ``paths`` with: ``n_ctx`` as asked, or where the user set none, 4096 or the
    largest power of two down to 512 that fits. Raises a one-line error when the set does not fit at all."""
    paths = [Path(path) for path in paths]
    available = available_memory()
    if n_ctx is None:
        n_ctx = DEFAULT_CTX
        while n_ctx > MIN_CTX and set_need(paths, n_ctx) > available:
            n_ctx //= 2
    need = set_need(paths, n_ctx)
    if need > available:
        weights = sum(model_need(path, n_ctx).weights for path in paths)
        raise AssistantError(
            f"{paths[0] if paths else 'the model set'}: this model set needs {format_size(need)} of memory ({format_size(weights)} of weights, the rest cache "
            f"and buffers for {n_ctx} tokens) but {format_size(available)} is free: close other programs, take fewer "
            f"levels (--levels 1), a smaller context (--ctx), a quantized target (assistant import FILE.gguf), or put "
            f"the target on another machine (--target-rpc)")
    return n_ctx
