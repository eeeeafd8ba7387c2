"""What a model set needs in memory against what llama.cpp really takes, and the refusal of a set that does not fit."""

import mmap
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from assistant.engine import memory
from assistant.engine.gguf_header import read_header
from assistant.errors import AssistantError
from assistant.speculative.pipeline import context_size

MIB = 1 << 20


def assistant(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "assistant", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def test_cache_and_buffers_match_what_llama_cpp_allocates(bench_gguf):
    target = bench_gguf["target_bf16"]
    result = assistant("generate", "--target", target, "--ctx", 1024, "-n", 1, "hi", env={"ASSISTANT_LLAMA_LOG": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    kv = float(re.search(r"llama_kv_cache: size =\s+([\d.]+) MiB", result.stderr).group(1))
    compute = float(re.search(r"CPU compute buffer size =\s+([\d.]+) MiB", result.stderr).group(1))
    need = memory.model_need(target, 1024)
    assert need.kv_cache / MIB == pytest.approx(kv, abs=0.01)
    assert compute <= need.compute / MIB <= 1.5 * compute + 16


def test_the_need_covers_a_whole_run(bench_gguf):
    """Peak resident memory of a real chain at 4096 tokens stays under the need the check compares."""
    paths = [bench_gguf["target_bf16"], bench_gguf["target_mxfp4"], bench_gguf["draft_bf16"]]
    args = ["generate", "--target", paths[0], "--draft", paths[1], "--draft", paths[2], "--ctx", 4096, "-n", 32,
            "Write a function that adds two numbers."]
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)")
    peak = int(subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "assistant", *map(str, args)],
                              capture_output=True, text=True, check=True).stdout)
    need = memory.set_need(paths, 4096)
    assert peak <= need <= 3 * peak, (peak, need)


def test_a_set_that_does_not_fit_is_refused_before_anything_loads(bench_gguf, tmp_path):
    target, copy = bench_gguf["target_bf16"], bench_gguf["target_mxfp4"]
    tight = {memory.AVAILABLE_VARIABLE: "50M", "ASSISTANT_LLAMA_LOG": "1", "ASSISTANT_HOME": str(tmp_path / "home")}
    result = assistant("generate", "--target", target, "--draft", copy, "hi", env=tight)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]  # llama.cpp logged nothing: no model was opened
    assert lines[0].startswith(f"error: {target}: this model set needs ")
    assert "52.4 MB is free" in lines[0] and "--levels 1" in lines[0] and "--ctx" in lines[0]
    register = ("import sys; from assistant import modelsets; from pathlib import Path; "
                "modelsets.register('tight', [modelsets.Level('target', Path(sys.argv[1])), "
                "modelsets.Level('mxfp4', Path(sys.argv[2]))])")
    subprocess.run([sys.executable, "-c", register, str(target), str(copy)], check=True, env={**os.environ, **tight})
    # the server refuses before it serves, with the same line
    served = assistant("serve", "-m", "tight", "--port", 0, env=tight, timeout=60)
    assert served.returncode == 1 and "this model set needs" in served.stderr, served.stderr[-2000:]
    assert "serving" not in served.stderr
    # doctor shows every set's need and warns where it exceeds what is free
    doctor = assistant("doctor", env=tight)
    assert re.search(r"memory\s+needs [\d.]+ MB at 4096 tokens of context \([\d.]+ MB for the target alone\)",
                     doctor.stdout), doctor.stdout
    assert "warning: model set 'tight' needs" in doctor.stdout


def test_the_context_follows_the_memory_when_not_set(bench_gguf, monkeypatch):
    paths = [bench_gguf["target_bf16"], bench_gguf["target_mxfp4"]]
    between = (memory.set_need(paths, 1024) + memory.set_need(paths, 2048)) // 2
    monkeypatch.setenv(memory.AVAILABLE_VARIABLE, str(between))
    assert context_size(paths) == 1024
    assert context_size(paths, levels=1) >= 2048  # the target alone needs less
    with pytest.raises(AssistantError, match="this model set needs .* for 4096 tokens"):
        context_size(paths, n_ctx=4096)  # a size the user asked for is not shrunk
    monkeypatch.setenv(memory.AVAILABLE_VARIABLE, "lots")
    with pytest.raises(AssistantError, match="ASSISTANT_MEMORY_AVAILABLE='lots': expected a size"):
        context_size(paths)


def test_cgroup_limits_count_with_their_reclaimable_cache(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "app" / "job").mkdir(parents=True)
    for directory, limit, current, inactive in ((v2 / "app", "4000", "1000", 0), (v2 / "app" / "job", "max", "900", 0)):
        (directory / "memory.max").write_text(limit + "\n")
        (directory / "memory.current").write_text(current + "\n")
        (directory / "memory.stat").write_text(f"anon 10\ninactive_file {inactive}\n")
    membership = tmp_path / "cgroup"
    membership.write_text("0::/app/job\n")
    assert memory.cgroup_room(v2, membership) == 3000  # the parent's limit binds
    v1 = tmp_path / "v1"
    (v1 / "memory" / "svc").mkdir(parents=True)
    (v1 / "memory" / "svc" / "memory.limit_in_bytes").write_text("8000\n")
    (v1 / "memory" / "svc" / "memory.usage_in_bytes").write_text("5000\n")
    (v1 / "memory" / "svc" / "memory.stat").write_text("cache 3000\ntotal_inactive_file 2000\n")
    membership.write_text("4:memory:/svc\n3:cpuset:/\n")
    assert memory.cgroup_room(v1, membership) == 5000
    membership.write_text("4:memory:/\n")
    assert memory.cgroup_room(v1, membership) is None  # no limit file at the root here


def test_a_real_cgroup_limit_refuses_the_set(bench_gguf, tmp_path):
    """Under a memory cgroup of 200 MB (where this machine lets us make one), the set is refused by the check
    rather than killed by the kernel."""
    group = Path("/sys/fs/cgroup/memory") / f"assistant-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(200 * 1000 * 1000))
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here ({error.strerror})")
    try:
        script = f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -m assistant generate --target " \
                 f"{bench_gguf['target_bf16']} --draft {bench_gguf['target_mxfp4']} -n 1 hi"
        result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=120)
    finally:
        group.rmdir()
    assert result.returncode == 1 and "this model set needs" in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("kind", ["bf16", "mxfp4"])
def test_weights_our_kernels_repack_are_held_once(bench_gguf, kind):
    """Where our buffer type copies the weights into its layout, the mapped file's pages leave the process as
    each matrix is copied (native/src/assistant-kernels.cpp): one copy resident, not two. With llama.cpp's stock
    BF16 kernels, and with ours reading BF16 or MXFP4 rows where they lie (ASSISTANT_WEIGHTS=mapped), the
    mapping is the weights, used in place: no copy in anonymous memory. (Stock MXFP4 is copied too, into ggml's
    own repacked layout.)"""
    target = bench_gguf[f"target_{kind}"]
    switch = "ASSISTANT_BF16_KERNEL" if kind == "bf16" else "ASSISTANT_MXFP4_KERNEL"
    runs = (("auto", "packed"), ("auto", "mapped")) + ((("stock", "packed"),) if kind == "bf16" else ())
    probe = ("import sys; from assistant.engine import Model; m = Model(sys.argv[1]); inside = False; rss = 0\n"
             "for line in open('/proc/self/smaps'):\n"
             "    if '-' in line.split()[0]: inside = line.rstrip().endswith(sys.argv[1])\n"
             "    elif inside and line.startswith('Rss:'): rss += int(line.split()[1]) * 1024\n"
             "anon = [int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('RssAnon:')][0]\n"
             "print(rss, anon)")
    resident, anonymous = {}, {}
    for kernel, weights in runs:
        result = subprocess.run([sys.executable, "-c", probe, str(target)], capture_output=True, text=True, check=True,
                                env={**os.environ, switch: kernel, "ASSISTANT_WEIGHTS": weights})
        resident[kernel, weights], anonymous[kernel, weights] = map(int, result.stdout.split())
    # what may stay mapped: the token embeddings llama.cpp reads rows of in place, and tensors under 1 MiB
    kept = sum(t.nbytes for t in read_header(target).tensors if t.name == "token_embd.weight" or t.nbytes < MIB)
    size = target.stat().st_size
    assert resident["auto", "packed"] <= kept + MIB, (resident, kept)
    assert kind == "mxfp4" or kept < size / 2  # the BF16 fixture's matrices outweigh what stays mapped
    assert resident["auto", "mapped"] > 0.9 * size and resident.get(("stock", "packed"), size) > 0.9 * size, resident
    copied = size - kept  # what the packed buffer holds
    assert anonymous["auto", "packed"] - anonymous["auto", "mapped"] > 0.9 * copied, (anonymous, copied)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the page cache is Linux's")
def test_mapped_weights_are_read_into_the_page_cache_first(bench_gguf, tmp_path):
    """ASSISTANT_WEIGHTS=mapped: before llama.cpp maps a file, the loader reads it into the page cache (in 2 MB
    pages where Linux allows), and a file cached whole already is left alone. A copy of the fixture is dropped
    from the cache first, so the read is real."""
    from assistant.engine import mapped_weights

    path = tmp_path / "copy.gguf"
    path.write_bytes(bench_gguf["target_bf16"].read_bytes())
    libc = mapped_weights._libc()
    with open(path, "rb") as file:
        os.fsync(file.fileno())
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        size = path.stat().st_size
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, file.fileno(), 0)
        try:
            before = mapped_weights.cached_whole(libc, address, size)
            assert mapped_weights.read_in_huge_pages(path)
            after = mapped_weights.cached_whole(libc, address, size)
        finally:
            libc.munmap(address, size)
    assert not before and after
    assert mapped_weights.without_extra_buffers(bench_gguf["target_bf16"])
    assert mapped_weights.without_extra_buffers(bench_gguf["target_mxfp4"])


CHOOSE = ("import os, sys\nfrom assistant.engine.mapped_weights import choose_for\nchoose_for(sys.argv[1:])\n"
          "print(os.environ['ASSISTANT_WEIGHTS'])")


def test_weights_are_read_where_mapped_when_the_files_and_a_copy_would_not_fit(bench_gguf):
    """Unset, ASSISTANT_WEIGHTS follows the memory: a set whose files and a packed copy of them fit together is
    copied (faster prompts), one where they do not is read where mapped (its files can then stay in the page
    cache between starts); the user's own setting is kept either way."""
    files = [bench_gguf["target_bf16"], bench_gguf["target_mxfp4"]]
    total = sum(path.stat().st_size for path in files)
    base = {key: value for key, value in os.environ.items() if key != "ASSISTANT_WEIGHTS"}
    for available, setting, expected in ((3 * total, None, "packed"), (total * 3 // 2, None, "mapped"),
                                         (total * 3 // 2, "packed", "packed")):
        env = {**base, "ASSISTANT_MEMORY_AVAILABLE": str(available), **({"ASSISTANT_WEIGHTS": setting} if setting else {})}
        chosen = subprocess.run([sys.executable, "-c", CHOOSE, *map(str, files)], capture_output=True, text=True,
                                env=env, check=True).stdout.strip()
        assert chosen == expected, (available, setting, chosen)
