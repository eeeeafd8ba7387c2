"""`assistant doctor` on this machine: CPU features from /proc/cpuinfo, our kernels, model sets."""

import subprocess
import sys
from pathlib import Path

import pytest

from assistant import modelsets
from assistant.commands.doctor import CPU_FEATURES, cpu_model_and_flags


def doctor():
    return subprocess.run([sys.executable, "-m", "assistant", "doctor"], capture_output=True, text=True)


def test_reports_cpu_features_as_the_kernel_sees_them():
    _, flags = cpu_model_and_flags()
    out = doctor().stdout
    features = next(line for line in out.splitlines() if line.startswith("CPU features"))
    for flag, name in CPU_FEATURES.items():
        assert f"{name} {'yes' if flag in flags else 'no'}" in features


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists() or "avx512_vnni" not in Path("/proc/cpuinfo").read_text(),
                    reason="needs a CPU with AVX512-VNNI")
def test_our_kernel_is_compiled_in_and_active():
    result = doctor()
    line = next(line for line in result.stdout.splitlines() if line.startswith("our kernels"))
    assert "mxfp4=" in line and "mxfp4=stock" not in line, line


def test_missing_model_file_is_a_problem_and_exit_code(tmp_path):
    missing = tmp_path / "gone.bf16.gguf"
    modelsets.register("broken", [modelsets.Level("target", missing)])
    result = doctor()
    assert result.returncode == 1
    assert f"problem: model set 'broken': {missing} is missing" in result.stdout
