"""`assistant doctor` on this machine: CPU features from /proc/cpuinfo, our kernels' paths, model sets."""

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from assistant import modelsets


def doctor(emulator=(), **env):
    """`assistant doctor` with ``env`` added, run under ``emulator`` (a qemu-x86_64 command) if given."""
    return subprocess.run([*emulator, sys.executable, "-m", "assistant", "doctor"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def flags_read_here() -> set[str]:
    """The first flags line of /proc/cpuinfo, read independently of the code under test."""
    match = re.search(r"^(?:flags|Features)\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def line(out: str, label: str) -> str:
    return next(row for row in out.splitlines() if row.startswith(label))


has_avx2 = {"avx2", "fma"} <= flags_read_here() if Path("/proc/cpuinfo").exists() else False


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads /proc/cpuinfo")
def test_reports_cpu_features_and_class_from_cpuinfo():
    flags = flags_read_here()
    out = doctor().stdout
    features = line(out, "CPU features")
    for flag, name in (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_vnni", "AVX512-VNNI"), ("amx_int8", "AMX-INT8")):
        assert f"{name} {'yes' if flag in flags else 'no'}" in features, (flag, features)
    kind = line(out, "CPU class")
    if platform.machine() == "x86_64":
        expected = ("AMX" if "amx_int8" in flags else "AVX512-VNNI" if "avx512_vnni" in flags
                    else "AVX-VNNI" if "avx_vnni" in flags else "AVX2" if "avx2" in flags else "no AVX2")
        assert kind.endswith(expected) or f"x86-64 {expected}" in kind, (expected, kind)


@pytest.mark.skipif(not has_avx2, reason="our fast paths need AVX2 and FMA on x86-64")
def test_fast_paths_are_active_and_all_good():
    result = doctor()
    kernels = line(result.stdout, "our kernels")
    for kind in ("mxfp4", "bf16"):
        path = re.search(rf"{kind}=(\S+)", kernels).group(1)
        assert path not in ("stock", "scalar"), kernels
    if huge_pages_read_here() == "never":  # the one warning this machine's settings may add
        assert result.stdout.count("warning:") == 1 and "transparent huge pages are off" in result.stdout
        return
    assert "warning:" not in result.stdout and result.stdout.rstrip().endswith("all good"), result.stdout


def huge_pages_read_here() -> str | None:
    setting = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    match = re.search(r"\[(\w+)\]", setting.read_text()) if setting.exists() else None
    return match.group(1) if match else None


def test_shows_the_huge_page_mode_and_warns_when_it_is_never(tmp_path):
    from assistant import cpu

    mode = huge_pages_read_here()
    rows = [row for row in doctor().stdout.splitlines() if row.startswith("huge pages")]
    assert rows == ([] if mode is None else [f"{'huge pages':<22} {mode} (Linux's transparent huge pages; our weight "
                                             "buffers ask for them)"])
    setting = tmp_path / "enabled"
    for text, expected in (("always [madvise] never\n", "madvise"), ("[always] madvise never\n", "always"),
                           ("always madvise [never]\n", "never"), ("garbled\n", None)):
        setting.write_text(text)
        assert cpu.huge_pages(setting) == expected
    assert cpu.huge_pages(tmp_path / "missing") is None
    assert cpu.huge_page_warnings("madvise", setting) == cpu.huge_page_warnings(None, setting) == []
    (warning,) = cpu.huge_page_warnings("never", setting)
    assert str(setting) in warning and "echo madvise" in warning


def test_names_the_cpu_variant_in_use():
    from native import build

    row = line(doctor().stdout, "CPU variant")
    if build.flavour() == "native":
        assert "none: one build for the machine that compiled it" in row
        return
    variant = re.fullmatch(r"CPU variant\s+(\S+) \(libggml-cpu-\1\.so, the best of (\d+) for this CPU\)", row)
    assert variant and int(variant.group(2)) >= 2, row
    if has_avx2:  # a variant built for AVX2 or better, not one of the older families'
        assert variant.group(1) not in ("x64", "sse42", "sandybridge", "ivybridge", "piledriver"), row


def test_a_named_cpu_variant_is_loaded_instead_of_the_best_and_a_wrong_name_is_one_line():
    """ASSISTANT_CPU_VARIANT: a lesser CPU's build of llama.cpp on this one (to measure what it runs)."""
    from native import build

    if build.flavour() == "native":
        pytest.skip("the native flavour has no variants")
    from assistant.engine import backend

    baseline = "x64" if platform.machine() == "x86_64" else backend.cpu_variants()[0]
    row = line(doctor(ASSISTANT_CPU_VARIANT=baseline).stdout, "CPU variant")
    assert re.fullmatch(rf"CPU variant\s+{baseline} \(libggml-cpu-{baseline}\.so, named by ASSISTANT_CPU_VARIANT; "
                        r"of \d+\)", row), row
    wrong = doctor(ASSISTANT_CPU_VARIANT="pentium")
    problem = [row for row in wrong.stdout.splitlines() if "pentium" in row]
    assert wrong.returncode == 1 and len(problem) == 1 and "no such llama.cpp CPU variant" in problem[0], wrong.stdout


def test_forced_scalar_path_is_a_warning_not_all_good():
    result = doctor(ASSISTANT_MXFP4_KERNEL="scalar")
    assert "mxfp4=scalar" in line(result.stdout, "our kernels")
    assert "warning: MXFP4 runs our scalar reference path" in result.stdout
    assert "all good" not in result.stdout and result.returncode == 0


def test_stock_switch_is_named_in_a_warning():
    result = doctor(ASSISTANT_BF16_KERNEL="stock")
    assert "bf16=stock" in line(result.stdout, "our kernels")
    assert "warning: BF16 runs llama.cpp's stock kernel (ASSISTANT_BF16_KERNEL=stock)" in result.stdout



def test_bf16_weights_read_where_mapped_are_named_and_all_good():
    """ASSISTANT_WEIGHTS=mapped is a choice of where BF16 matrices are read, not a slower kernel: named in the
    kernels row, no warning; a word it does not know is said once and packed is kept."""
    result = doctor(ASSISTANT_WEIGHTS="mapped")
    assert "weights=mapped" in line(result.stdout, "our kernels") and "(active)" in line(result.stdout, "our kernels")
    assert not [row for row in result.stdout.splitlines() if "warning" in row and "BF16" in row], result.stdout
    odd = doctor(ASSISTANT_WEIGHTS="sideways")
    assert "weights" not in line(odd.stdout, "our kernels")
    assert "ASSISTANT_WEIGHTS=sideways not understood" in odd.stderr

has_amx = "amx_int8" in flags_read_here() if Path("/proc/cpuinfo").exists() else False


@pytest.mark.skipif(has_amx and shutil.which("qemu-x86_64") is None,
                    reason="on a CPU with AMX, needs qemu-x86_64 to be one without (apt-get install qemu-user)")
def test_a_path_the_cpu_cannot_run_is_refused_not_run():
    """Forcing AMX on a CPU without it says so and keeps the best path (running it would die of SIGILL). On a
    CPU with AMX, the CPU without it is a Haswell emulated by qemu-x86_64 (its CPUID has AVX2, no AVX-512)."""
    result = doctor(["qemu-x86_64", "-cpu", "Haswell-v4"] if has_amx else [], ASSISTANT_MXFP4_KERNEL="amx")
    assert result.returncode == 0, result.stderr
    assert "ASSISTANT_MXFP4_KERNEL=amx: this CPU cannot run that path" in result.stderr
    assert "mxfp4=amx" not in line(result.stdout, "our kernels")
    if has_amx:
        assert "mxfp4=avx2" in line(result.stdout, "our kernels"), result.stdout


def test_missing_model_file_is_a_problem_and_exit_code(tmp_path):
    missing = tmp_path / "gone.bf16.gguf"
    modelsets.register("broken", [modelsets.Level("target", missing)])
    result = doctor()
    assert result.returncode == 1
    assert f"problem: model set 'broken': {missing} is missing" in result.stdout


def test_each_set_says_where_its_weights_will_be_read(bench_gguf):
    """Unset, ASSISTANT_WEIGHTS follows the memory (engine/mapped_weights.py): doctor says per set whether its
    weights will be copied into our layout or read where the files are mapped, and why."""
    levels = [modelsets.Level("target", bench_gguf["target_bf16"]), modelsets.Level("mxfp4", bench_gguf["target_mxfp4"])]
    modelsets.register("mini", levels)
    files = sum(level.path.stat().st_size for level in levels)
    env = {key: value for key, value in os.environ.items() if key != "ASSISTANT_WEIGHTS"}
    for available, expected in ((4 * files, "copied into our kernels' layout (the files and a copy fit together)"),
                                (files * 3 // 2, "read where the files are mapped (the files and a copy would not fit")):
        result = subprocess.run([sys.executable, "-m", "assistant", "doctor"], capture_output=True, text=True,
                                env={**env, "ASSISTANT_MEMORY_AVAILABLE": str(available)}, timeout=300)
        assert expected in line(result.stdout, "  weights"), result.stdout
