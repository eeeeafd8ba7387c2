"""Check this machine and installation: CPU features, our kernels, the llama.cpp build, model sets, disk.

Exits non-zero, naming each problem, when something a user needs is missing; warns (exit 0) when a weight
type runs a slower path than this CPU could, or llama.cpp's stock kernel.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from assistant import cpu
from assistant.errors import AssistantError

HELP = "check the CPU, the native backend, the model sets and the data directory"


def add_arguments(parser) -> None:
    pass


def cpu_variant_text(library: Path, variant: str, count: int) -> str:
    """Which build of llama.cpp's CPU code runs, e.g. "haswell (libggml-cpu-haswell.so, the best of 14 for
    this CPU)"; the native flavour has one, for the CPU that compiled it."""
    if not variant:
        return f"none: one build for the machine that compiled it ({library.name})"
    from assistant.engine import backend

    if backend.forced_variant():
        return f"{variant} ({library.name}, named by {backend.VARIANT_VARIABLE}; of {count})"
    return f"{variant} ({library.name}, the best of {count} for this CPU)"


def run(args) -> int:
    from assistant import home, modelsets
    from assistant.diskspace import format_size
    from assistant.engine import memory
    from assistant.engine.mapped_weights import default_mode

    problems: list[str] = []
    warnings: list[str] = []

    def row(label: str, value: str) -> None:
        print(f"{label:<22} {value}")

    this = cpu.this_cpu()
    row("CPU", f"{this.model} ({os.cpu_count()} logical cores)")
    row("CPU class", this.kind)
    row("CPU features", "  ".join(f"{name} {'yes' if flag in this.flags else 'no'}" for flag, name in cpu.FEATURES.items()))

    try:
        from assistant.engine import backend

        backend.keep_kernel_choices()
        import llama_cpp

        row("llama-cpp-python", f"{llama_cpp.__version__} ({Path(llama_cpp.__file__).parent})")
        backend.llama()
        info = llama_cpp.llama_print_system_info().decode().strip()
        row("llama.cpp build", info)
        try:
            library = backend.cpu_backend_library()
            row("CPU variant", cpu_variant_text(library, backend.cpu_variant(library), len(backend.cpu_variants())))
            description = backend.kernel_description()
            paths = cpu.kernel_paths(description)
            fast = [kind for kind, path in paths.items() if kind in cpu.KERNEL_VARIABLES and path not in ("stock", "scalar")]
            row("our kernels", f"{description} ({'active' if fast else 'not in use'})")
            choices = Path(os.environ.get(backend.CHOICES_VARIABLE) or "")
            if choices.is_file():  # written where this CPU measured a choice (AVX512-BF16 without AMX)
                kept = " ".join(choices.read_text().split())
                row("kernel choices", f"{kept} (measured once for this CPU, kept in {choices})")
            warnings += cpu.kernel_warnings(description)
        except LookupError as error:
            row("our kernels", "missing")
            problems.append(f"the installed llama-cpp-python is not our patched build: {error}; run `make setup`")
    except ImportError as error:
        row("llama-cpp-python", "missing")
        problems.append(f"llama-cpp-python is not installed ({error}); run `make setup`")
    except AssistantError as error:
        problems.append(str(error))

    pages = cpu.huge_pages()
    if pages is not None:
        row("huge pages", f"{pages} (Linux's transparent huge pages; our weight buffers ask for them)")
        warnings += cpu.huge_page_warnings(pages)

    data = home.data_dir()
    row("data directory", str(data))
    free = shutil.disk_usage(data).free
    row("free disk space", format_size(free))
    if free < 1_000_000_000:
        problems.append(f"only {format_size(free)} free in {data}")

    available = memory.available_memory()
    row("free memory", f"{format_size(available)} (what Linux can give without swapping, within any cgroup limit)")

    try:
        sets, default = modelsets.list_sets()
    except modelsets.ModelSetError as error:
        sets, default = [], None
        problems.append(str(error))
    if not sets:
        row("model sets", "none yet (`assistant chat` imports the demo set on first use)")
    for model_set in sets:
        mark = " (default)" if model_set.name == default else ""
        row(f"model set{mark}", model_set.name)
        for level in model_set.levels:
            state = format_size(level.size_bytes) if level.path.exists() else "MISSING"
            row(f"  {level.role}", f"{level.path} {state}")
        for path in model_set.missing_files():
            problems.append(f"model set {model_set.name!r}: {path} is missing")
        if not model_set.missing_files():
            paths = [level.path for level in model_set.levels]
            need, alone = (memory.set_need(chosen, memory.DEFAULT_CTX) for chosen in (paths, paths[:1]))
            row("  memory", f"needs {format_size(need)} at {memory.DEFAULT_CTX} tokens of context "
                f"({format_size(alone)} for the target alone)")
            chosen = os.environ.get("ASSISTANT_WEIGHTS")
            mode = chosen or default_mode(paths)
            where = "read where the files are mapped" if mode == "mapped" else "copied into our kernels' layout"
            why = "ASSISTANT_WEIGHTS" if chosen else (
                "the files and a copy would not fit together" if mode == "mapped" else "the files and a copy fit together")
            row("  weights", f"{where} ({why})")
            if need > available:
                warnings.append(f"model set {model_set.name!r} needs {format_size(need)} of memory at "
                                f"{memory.DEFAULT_CTX} tokens, {format_size(available)} is free: it loads with a "
                                f"smaller context, or not at all (try --levels 1)")

    if problems or warnings:
        print()
    for warning in warnings:
        print(f"warning: {warning}")
    for problem in problems:
        print(f"problem: {problem}")
    if problems:
        return 1
    print("\nall good" if not warnings else f"\nworks, with {len(warnings)} warning(s) above")
    return 0
