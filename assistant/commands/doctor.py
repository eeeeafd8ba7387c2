"""Check this machine and installation: CPU features, our kernels, the llama.cpp build, model sets, disk.

Exits non-zero, naming each problem, when something a user needs is missing.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
from pathlib import Path

HELP = "check the CPU, the native backend, the model sets and the data directory"

# /proc/cpuinfo flag -> the name people know it by
CPU_FEATURES = {
    "avx2": "AVX2",
    "avx512f": "AVX-512",
    "avx512_vnni": "AVX512-VNNI",
    "avx_vnni": "AVX-VNNI",
    "avx_vnni_int8": "AVX-VNNI-INT8",
    "avx512_bf16": "AVX512-BF16",
    "amx_int8": "AMX-INT8",
}


def add_arguments(parser) -> None:
    pass


def cpu_model_and_flags() -> tuple[str, set[str]]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return model, flags


def kernel_description() -> str:
    """What our kernels report through the symbol the patched libggml-cpu exports."""
    import llama_cpp

    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    for lib in sorted(lib_dir.glob("libggml-cpu*.so")):
        try:
            describe = ctypes.CDLL(str(lib)).assistant_kernels_describe
        except (OSError, AttributeError):
            continue
        describe.restype = ctypes.c_char_p
        return describe().decode()
    raise LookupError(f"no libggml-cpu in {lib_dir} exports assistant_kernels_describe")


def human_size(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size} B"


def run(args) -> int:
    from assistant import home, modelsets

    problems: list[str] = []

    def row(label: str, value: str) -> None:
        print(f"{label:<22} {value}")

    model, flags = cpu_model_and_flags()
    row("CPU", f"{model} ({os.cpu_count()} logical cores)")
    row("CPU features", "  ".join(f"{name} {'yes' if flag in flags else 'no'}" for flag, name in CPU_FEATURES.items()))

    try:
        import llama_cpp

        row("llama-cpp-python", f"{llama_cpp.__version__} ({Path(llama_cpp.__file__).parent})")
        info = llama_cpp.llama_print_system_info().decode().strip()
        row("llama.cpp build", info)
        try:
            description = kernel_description()
            active = [part for part in description.split() if not part.endswith("=stock")]
            row("our kernels", f"{description} ({'active' if active else 'compiled in, switched to stock'})")
            if not active:
                problems.append("our MXFP4/BF16 kernels are switched off (ASSISTANT_*_KERNEL=stock or no CPU support)")
        except LookupError as error:
            row("our kernels", "missing")
            problems.append(f"the installed llama-cpp-python is not our patched build: {error}; run `make setup`")
    except ImportError as error:
        row("llama-cpp-python", "missing")
        problems.append(f"llama-cpp-python is not installed ({error}); run `make setup`")

    data = home.data_dir()
    row("data directory", str(data))
    free = shutil.disk_usage(data).free
    row("free disk space", human_size(free))
    if free < 1_000_000_000:
        problems.append(f"only {human_size(free)} free in {data}")

    try:
        sets, default = modelsets.list_sets()
    except modelsets.ModelSetError as error:
        sets, default = [], None
        problems.append(str(error))
    if not sets:
        row("model sets", "none yet (`assistant chat` converts the bundled demo set on first use)")
    for model_set in sets:
        mark = " (default)" if model_set.name == default else ""
        row(f"model set{mark}", model_set.name)
        for level in model_set.levels:
            state = human_size(level.size_bytes) if level.path.exists() else "MISSING"
            row(f"  {level.role}", f"{level.path} {state}")
        for path in model_set.missing_files():
            problems.append(f"model set {model_set.name!r}: {path} is missing")

    if problems:
        print()
        for problem in problems:
            print(f"problem: {problem}")
        return 1
    print("\nall good")
    return 0
