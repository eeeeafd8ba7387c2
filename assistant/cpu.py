"""What this CPU is and what our kernels make of it: one reader of /proc/cpuinfo, the kernel paths a description
(engine/backend.py asks the loaded backend for it) names, and the warnings they call for.

Every figure we report names the CPU class beside it, since our kernels take different instruction paths
on an AVX2 laptop, an AVX-512 or AMX server and an ARM64 machine.
"""

from __future__ import annotations

import hashlib
import os
import platform
from dataclasses import dataclass
from pathlib import Path

# /proc/cpuinfo flag -> the name people know it by
FEATURES = {
    "avx2": "AVX2",
    "avx512f": "AVX-512",
    "avx512_vnni": "AVX512-VNNI",
    "avx_vnni": "AVX-VNNI",
    "avx_vnni_int8": "AVX-VNNI-INT8",
    "avx512_bf16": "AVX512-BF16",
    "amx_int8": "AMX-INT8",
    "asimddp": "ARM dotprod",
}
KERNEL_VARIABLES = {"mxfp4": "ASSISTANT_MXFP4_KERNEL", "q8": "ASSISTANT_Q8_KERNEL", "bf16": "ASSISTANT_BF16_KERNEL",
                    "kquant": "ASSISTANT_KQUANT_KERNEL", "attention": "ASSISTANT_ATTENTION"}
# every weight kernel of ours switched off, so llama.cpp's own run (our attention goes with them: it exists only
# beside one of ours): what a user of plain llama.cpp runs, the baseline of every A/B
STOCK_KERNELS = {variable: "stock" for kind, variable in KERNEL_VARIABLES.items() if kind != "attention"}


def cpuinfo_records(path: Path = Path("/proc/cpuinfo")) -> list[dict[str, str]]:
    """One dict per logical CPU ("processor" block), empty where the file does not exist."""
    records: list[dict[str, str]] = [{}]
    try:
        for line in path.read_text().splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                if records[-1]:
                    records.append({})
                continue
            records[-1][key.strip()] = value.strip()
    except OSError:
        return []
    return [record for record in records if record]


@dataclass(frozen=True)
class Cpu:
    model: str
    flags: frozenset[str]
    machine: str

    @property
    def kind(self) -> str:
        """The class our kernels care about, e.g. "x86-64 AVX2" or "x86-64 AMX"."""
        f = self.flags
        if self.machine in ("aarch64", "arm64"):
            return "ARM64 dotprod" if "asimddp" in f else "ARM64"
        if {"amx_int8", "amx_bf16"} <= f:
            return "x86-64 AMX"
        if {"avx512f", "avx512_vnni"} <= f:
            return "x86-64 AVX512-VNNI"
        if "avx_vnni" in f:
            return "x86-64 AVX-VNNI"
        if {"avx2", "fma"} <= f:
            return "x86-64 AVX2"
        return f"{self.machine} (no AVX2)"

    def describe(self) -> str:
        return f"{self.model} [{self.kind}]"


def this_cpu(records: list[dict[str, str]] | None = None) -> Cpu:
    """This machine's CPU, from ``records`` (cpuinfo_records) when the caller has read them already."""
    records = cpuinfo_records() if records is None else records
    first = records[0] if records else {}
    model = first.get("model name") or first.get("Model") or platform.processor() or platform.machine()
    flags = first.get("flags") or first.get("Features") or ""
    return Cpu(model, frozenset(flags.split()), platform.machine())


def kernel_paths(description: str) -> dict[str, str]:
    """{"mxfp4": "avx2", "bf16": "stock"} from a description."""
    return dict(part.split("=", 1) for part in description.split() if "=" in part)


# The least a CPU needs for any fast path of ours, by weight type.
FAST_PATH_NEEDS = {"mxfp4": "AVX2 and FMA on x86-64, the dot-product extension on ARM64",
                   "bf16": "AVX2 and FMA on x86-64, NEON on ARM64",
                   "kquant": "AVX2, FMA and F16C on x86-64, the dot-product extension on ARM64"}


HUGE_PAGES_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_pages(setting: Path = HUGE_PAGES_SETTING) -> str | None:
    """Linux's transparent huge page mode, the bracketed word of its setting ("always", "madvise" or
    "never"); None where there is no such setting (another OS, or a kernel built without them)."""
    try:
        text = setting.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def huge_page_warnings(mode: str | None, setting: Path = HUGE_PAGES_SETTING) -> list[str]:
    """Our weight buffers ask for transparent huge pages (native/README.md); "never" refuses them."""
    if mode != "never":
        return []
    return [f"transparent huge pages are off ({setting}: never): the weights stream on 4 KB pages, the MXFP4 "
            f"level about 10% slower a token; `echo madvise | sudo tee {setting}` turns them on"]


def kernel_warnings(description: str, environ=os.environ) -> list[str]:
    """A line for each weight type that does not run a fast path of ours, saying why."""
    warnings = []
    for kind, path in kernel_paths(description).items():
        if kind not in KERNEL_VARIABLES:
            continue  # not a kernel (weights: where BF16 matrices are read)
        variable = KERNEL_VARIABLES.get(kind, kind)
        chosen = environ.get(variable, "").strip()
        if path == "scalar":
            warnings.append(f"{kind.upper()} runs our scalar reference path ({variable}={chosen or 'scalar'}): "
                            "correct but many times slower; unset it for the fast path")
        elif path == "stock" and kind == "attention" and chosen != "stock":
            continue  # it follows the weights: stock when neither weight type runs ours, said above
        elif path == "stock" and chosen == "stock":
            warnings.append(f"{kind.upper()} runs llama.cpp's stock kernel ({variable}=stock)")
        elif path == "stock":
            warnings.append(f"{kind.upper()} runs llama.cpp's stock kernel: this CPU has no fast path of ours for it "
                            f"(ours need {FAST_PATH_NEEDS.get(kind, 'AVX2 and FMA on x86-64')})")
    return warnings


def kernel_choices_path(environ=os.environ) -> Path:
    """Where this CPU's measured kernel choices are kept (native/src/bf16-gemm.cpp, ``remembered``): one file per
    CPU model, in the user's cache, so every process on this machine takes the same path and rounds alike."""
    records = cpuinfo_records()
    first = (records or [{}])[0]
    this = this_cpu(records)
    identity = "|".join([this.model, *(first.get(key, "") for key in ("cpu family", "model", "stepping")),
                         " ".join(sorted(this.flags))])
    cache = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "assistant" / "kernel-choices" / f"{hashlib.sha256(identity.encode()).hexdigest()[:16]}.txt"
