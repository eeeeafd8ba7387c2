"""Every kernel path, checked by a standalone C++ program (tests/native/kernel_check.cpp): natively on this
CPU, and for ARM64 cross-compiled with Debian's g++-aarch64-linux-gnu and run under qemu-user.

The ARM64 speed cannot be measured here; these tests show that the NEON paths compile for a baseline ARMv8
build and agree bit for bit with the scalar reference. `.ci/run` installs the cross compiler and qemu.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "tests/native/kernel_check.cpp", ROOT / "native/src/mxfp4-gemm.cpp", ROOT / "native/src/bf16-gemm.cpp",
           ROOT / "native/src/q8-gemm.cpp", ROOT / "native/src/attention.cpp", ROOT / "native/src/kquant-gemm.cpp"]
CROSS = "aarch64-linux-gnu-g++"
QEMU = "qemu-aarch64"


def build(compiler: str, flags: list[str], out: Path) -> Path:
    subprocess.run([compiler, "-O2", "-std=c++17", *flags, f"-I{ROOT / 'native/src'}", *map(str, SOURCES),
                    "-o", str(out)], check=True)
    return out


def run(command: list[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith(" failed") and " 0 failed" in result.stdout, result.stdout
    return result.stdout


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 host")
def test_every_path_this_cpu_has_agrees_with_scalar(tmp_path):
    """Built for the baseline x86-64, the check finds and runs each path the CPU's flags promise."""
    out = run([str(build("c++", ["-march=x86-64", "-mtune=generic", "-w"], tmp_path / "kernel-check"))])
    flags = cpu_flags()
    expected = {
        "mxfp4 avx2": {"avx2", "fma"} <= flags,
        "mxfp4 avx-vnni": {"avx2", "fma", "avx_vnni"} <= flags,
        "mxfp4 avx512-vnni": {"avx512f", "avx512bw", "avx512_vnni"} <= flags,
        "q4_k avx2": {"avx2", "fma", "f16c"} <= flags,
        "q4_k avx-vnni": {"avx2", "fma", "f16c", "avx_vnni"} <= flags,
        "q4_k avx512-vnni": {"avx512f", "avx512bw", "avx512_vnni"} <= flags,
        "q5_k avx2": {"avx2", "fma", "f16c"} <= flags,
        "q5_k avx-vnni": {"avx2", "fma", "f16c", "avx_vnni"} <= flags,
        "q5_k avx512-vnni": {"avx512f", "avx512bw", "avx512_vnni"} <= flags,
        "q6_k avx2": {"avx2", "fma", "f16c"} <= flags,
        "q6_k avx-vnni": {"avx2", "fma", "f16c", "avx_vnni"} <= flags,
        "q6_k avx512-vnni": {"avx512f", "avx512bw", "avx512_vnni"} <= flags,
        "bf16 avx2": {"avx2", "fma"} <= flags,
        **{f"{kind} {path}": has for kind in ("q8_0", "q4_0", "q4_1") for path, has in (
            ("avx2", {"avx2", "fma", "f16c"} <= flags), ("avx-vnni", {"avx2", "fma", "f16c", "avx_vnni"} <= flags),
            ("avx512-vnni", {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni"} <= flags))},
        "bf16 avx512": "avx512f" in flags,
    }
    expected["attention avx2"] = {"avx2", "fma", "f16c"} <= flags
    expected["attention avx512"] = {"avx2", "fma", "f16c", "avx512f"} <= flags
    for path, has in expected.items():
        assert (f"ok   {path} equals scalar bit for bit" in out) == has, (path, out)
        assert (f"skip {path}:" in out) == (not has), (path, out)
    if {"avx2", "fma"} <= flags:
        assert "mxfp4 default path: scalar" not in out and "bf16 default path: scalar" not in out


needs_cross = pytest.mark.skipif(shutil.which(CROSS) is None or shutil.which(QEMU) is None,
                                 reason=f"needs {CROSS} and {QEMU} (apt-get install g++-aarch64-linux-gnu qemu-user)")


@pytest.fixture(scope="module")
def arm64_check(tmp_path_factory) -> Path:
    return build(CROSS, ["-march=armv8-a", "-static", "-Wall", "-Werror"], tmp_path_factory.mktemp("arm64") / "kernel-check")


@needs_cross
def test_neon_paths_agree_with_scalar_under_qemu(arm64_check):
    """A CPU with the dot-product extension runs both NEON paths; each equals scalar bit for bit."""
    out = run([QEMU, "-cpu", "max", str(arm64_check)])
    for kernel in ("mxfp4", "q8_0", "q4_0", "q4_1", "bf16", "q4_k", "q5_k", "q6_k"):
        assert f"ok   {kernel} neon equals scalar bit for bit" in out, out
        assert f"ok   {kernel} neon is batch invariant" in out, out
        assert f"{kernel} default path: neon" in out, out
    assert "ok   attention scalar is batch invariant" in out, out  # ARM64 computes attention on the scalar path


@needs_cross
def test_arm64_without_dotprod_keeps_mxfp4_on_scalar(arm64_check):
    """A Cortex-A53 (ARMv8.0, no sdot) is refused the MXFP4, Q8 and K-quant NEON paths instead of faulting on them."""
    out = run([QEMU, "-cpu", "cortex-a53", str(arm64_check)])
    for kernel in ("mxfp4", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k"):
        assert f"skip {kernel} neon: this CPU cannot run it" in out, out
        assert f"{kernel} default path: scalar" in out, out
    assert "bf16 default path: neon" in out, out
