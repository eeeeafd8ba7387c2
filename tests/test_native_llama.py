"""Our kernels inside llama.cpp: registered, switchable, and agreeing with the stock kernels.

Each kernel setting needs its own process (ASSISTANT_*_KERNEL is read when ggml-cpu starts), so these
tests run ``native.bench.logits`` and ``native.bench``'s MUL_MAT program in subprocesses. They need the
llama_cpp wheel built by native/build.py installed in this Python; otherwise they skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from assistant.cpu import STOCK_KERNELS

REPO = Path(__file__).resolve().parents[1]


def _description() -> str:
    try:
        from native.bench.logits import kernels_description

        return kernels_description()
    except ImportError:
        return ""


pytestmark = pytest.mark.skipif(not _description(), reason="llama_cpp with our kernels is not installed")


def run_logits(model: Path, tokens: list[int], env: dict[str, str], tmp_path: Path, single=False, greedy=0):
    out = tmp_path / f"logits-{len(list(tmp_path.iterdir()))}.npy"
    cmd = [sys.executable, "-m", "native.bench.logits", str(model), "--tokens", ",".join(map(str, tokens)),
           "--out", str(out), "--greedy", str(greedy)] + (["--single"] if single else [])
    proc = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, **env), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return np.load(out), json.loads(proc.stdout.splitlines()[-1])


OURS = {variable: "auto" for variable in STOCK_KERNELS}
STOCK = dict(STOCK_KERNELS)


@pytest.fixture(scope="module")
def prompt_tokens() -> list[int]:
    """A real prompt's worth of token ids (the exact ids matter less than having many distinct ones)."""
    rng = np.random.default_rng(0)
    return [int(t) for t in rng.integers(100, 3000, size=40)]


def test_switches_select_the_kernels(bench_gguf, prompt_tokens, tmp_path):
    _, ours = run_logits(bench_gguf["target_bf16"], prompt_tokens[:4], OURS, tmp_path)
    _, stock = run_logits(bench_gguf["target_bf16"], prompt_tokens[:4], STOCK, tmp_path)
    _, half = run_logits(bench_gguf["target_bf16"], prompt_tokens[:4], {**STOCK_KERNELS, "ASSISTANT_BF16_KERNEL": "scalar"},
                         tmp_path)
    assert "stock" not in ours["kernels"]
    assert stock["kernels"] == "mxfp4=stock q8=stock bf16=stock kquant=stock attention=stock"  # no buffer of ours: no attention either
    assert half["kernels"].startswith("mxfp4=stock q8=stock bf16=scalar kquant=stock attention=")
    assert "attention=stock" not in half["kernels"]


@pytest.mark.parametrize("kind,rtol", [("bf16", 2e-3), ("mxfp4", 5e-2)])
def test_logits_match_the_stock_kernels(bench_gguf, prompt_tokens, tmp_path, kind, rtol):
    """BF16: both round activations to bf16, so only summation order differs. MXFP4: the stock path
    quantizes activations to q8_0 (fp16 scales), ours to int8 with f32 scales, so they differ more."""
    model = bench_gguf[f"target_{kind}"]
    ours, _ = run_logits(model, prompt_tokens, OURS, tmp_path)
    stock, _ = run_logits(model, prompt_tokens, STOCK, tmp_path)
    spread = stock.std(axis=1, keepdims=True)
    assert np.abs(ours - stock).max() / spread.min() < rtol * 10
    assert np.median(np.abs(ours - stock) / spread) < rtol
    assert (ours.argmax(axis=1) == stock.argmax(axis=1)).mean() >= 0.95


@pytest.mark.parametrize("path", ["avx512-bf16", "avx512", "avx2", "amx"])
def test_bf16_prompt_paths_match_the_stock_kernels(bench_gguf, prompt_tokens, tmp_path, path):
    """A 40-token prompt (beyond the 16 columns of a verification batch) takes each path's blocked prompt
    kernel inside llama.cpp; its logits agree with stock's as the default path's do."""
    ours, info = run_logits(bench_gguf["target_bf16"], prompt_tokens, dict(OURS, ASSISTANT_BF16_KERNEL=path), tmp_path)
    if f"bf16={path}" not in info["kernels"]:
        pytest.skip(f"this CPU does not run the {path} path")
    stock, _ = run_logits(bench_gguf["target_bf16"], prompt_tokens, STOCK, tmp_path)
    spread = stock.std(axis=1, keepdims=True)
    assert np.abs(ours - stock).max() / spread.min() < 2e-2
    assert np.median(np.abs(ours - stock) / spread) < 2e-3
    assert (ours.argmax(axis=1) == stock.argmax(axis=1)).mean() >= 0.95


@pytest.mark.parametrize("kind", ["bf16", "mxfp4"])
def test_scalar_path_agrees_in_llama(bench_gguf, prompt_tokens, tmp_path, kind):
    """The portable path runs inside llama.cpp too, and matches the vector path to float rounding."""
    var = f"ASSISTANT_{kind.upper()}_KERNEL"
    model = bench_gguf[f"target_{kind}"]
    vector, _ = run_logits(model, prompt_tokens[:8], OURS, tmp_path)
    scalar, info = run_logits(model, prompt_tokens[:8], dict(OURS, **{var: "scalar"}), tmp_path)
    assert f"{kind}=scalar" in info["kernels"]
    assert np.abs(vector - scalar).max() <= 1e-3 * np.abs(vector).max()


def test_our_mul_mat_is_batch_invariant_in_ggml():
    """Through the real backend: each column's bits equal that column alone, for N = 1, 3, 8, 16 and
    1 or 2 threads. The stock kernels are measured too (reported by the benchmark), not asserted."""
    from native import bench, build

    directory = build.cache_root() / build.build_key()
    if not (directory / "build-info.json").exists():
        pytest.skip(f"no native build for the current sources ({directory}); run native/build.py")
    kernels = ("mxfp4-ours", "bf16-ours", "q8_0-ours", "q4_0-ours", "q4_1-ours")
    result = bench.check_invariance(bench.mulmat_tool(directory), kernels=kernels)
    assert set(result) == set(kernels)
    assert all(r["batch_invariant"] for r in result.values()), result


def test_kernel_bench_reports_the_fma_peak_and_bf16_against_it():
    """The compute limit beside the bandwidth limit: the program measures the f32 multiply-add peak and the
    summary puts the BF16 kernel's batch of 16 against it."""
    from native import bench, build

    directory = build.cache_root() / build.build_key()
    if not (directory / "build-info.json").exists():
        pytest.skip(f"no native build for the current sources ({directory}); run native/build.py")
    run = bench.run_mulmat(bench.mulmat_tool(directory), threads=1, gb=0.05, reps=1, kernels=("bf16-ours",), ns=(1, 8, 16))
    assert run.fma_peak_gflops > 1 and run.fma_bits in (32, 128, 256)
    assert "n16_fraction_of_fma_peak" not in bench.summary(run)["bf16"]  # AMX, AVX-512: not the measured FMAs
    share = bench.summary(run, bf16_widens=True)["bf16"]["n16_fraction_of_fma_peak"]
    t16 = next(r["seconds"] for r in run.results if r["n"] == 16)
    assert share == pytest.approx(run.weight_bytes["bf16-ours"] * 16 / t16 / 1e9 / run.fma_peak_gflops)
    text = bench.markdown({"threads": 1, "bandwidth_gbps": run.bandwidth_gbps, "fma_peak_gflops": run.fma_peak_gflops,
                           "fma_bits": run.fma_bits, "weight_bytes": run.weight_bytes, "results": run.results,
                           "summary": bench.summary(run, bf16_widens=True)})
    assert f"f32 multiply-add peak ({run.fma_bits}-bit)" in text and "| N=16 share of the f32 FMA peak" in text


def test_kernel_bench_speed_of_light_is_the_best_read_and_never_below_a_kernel():
    """The bandwidth test reads the buffer every way it knows (plain, prefetch distances and levels, streaming,
    huge and 4 KB pages) and keeps the best; a kernel's effective rate above all of them raises the limit to
    it. On 50 MB sets in this CPU's cache the kernels outrun DRAM-sized readings, which exercises the rule."""
    from native import bench, build

    directory = build.cache_root() / build.build_key()
    if not (directory / "build-info.json").exists():
        pytest.skip(f"no native build for the current sources ({directory}); run native/build.py")
    run = bench.run_mulmat(bench.mulmat_tool(directory), threads=1, gb=0.05, reps=1, kernels=("bf16-ours",), ns=(1, 16))
    assert {"plain", "prefetch-t0-4k", "stream", "plain-4k-pages"} <= set(run.read_strategies)
    assert run.bandwidth_gbps >= max(run.read_strategies.values())
    assert run.bandwidth_gbps >= max(r["gbps"] for r in run.results)
    assert run.read_best in run.read_strategies or run.read_best.startswith("bf16-ours N=")
    text = bench.markdown({"threads": 1, "bandwidth_gbps": run.bandwidth_gbps, "read_best": run.read_best,
                           "read_strategies": run.read_strategies, "weight_bytes": run.weight_bytes,
                           "results": run.results, "summary": bench.summary(run)})
    assert f"({run.read_best}, the best of plain " in text


HUGE_PAGE_BYTES = """
import sys
from pathlib import Path
from native.bench.logits import Model
model = Model(Path(sys.argv[1]))
size, total = 0, 0
for line in Path("/proc/self/smaps").read_text().splitlines():
    if line.startswith("Size:"):
        size = int(line.split()[1]) * 1024
    elif line.startswith("VmFlags:") and "hg" in line.split()[1:]:
        total += size
print(total)
"""


@pytest.mark.skipif(not Path("/sys/kernel/mm/transparent_hugepage").exists(), reason="needs Linux with huge pages")
@pytest.mark.parametrize("kind", ["bf16", "mxfp4"])
def test_weights_ask_for_huge_pages(bench_gguf, kind):
    """Our buffer asks Linux for transparent huge pages over the weights it holds (smaps shows the "hg"
    flag): streaming them every token then takes no TLB miss per 4 KB page. Whether Linux grants them
    depends on its settings and free memory; the request is what our code controls."""
    model = bench_gguf[f"target_{kind}"]
    proc = subprocess.run([sys.executable, "-c", HUGE_PAGE_BYTES, str(model)], cwd=REPO, env=dict(os.environ, **OURS),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    advised = int(proc.stdout.split()[-1])
    matrices = sum(int(t.n_bytes) for t in gguf.GGUFReader(model).tensors  # what our buffer holds
                   if t.name != "token_embd.weight" and t.tensor_type.name in ("BF16", "MXFP4") and len(t.shape) == 2)
    assert matrices - 4 * 2**20 <= advised <= matrices, (advised, matrices)  # all but the ends' partial 2 MB
    stock = subprocess.run([sys.executable, "-c", HUGE_PAGE_BYTES, str(model)], cwd=REPO, env=dict(os.environ, **STOCK),
                           capture_output=True, text=True, timeout=300)
    assert stock.returncode == 0 and int(stock.stdout.split()[-1]) == 0  # llama.cpp's own buffers do not ask


@pytest.mark.parametrize("kind", ["bf16", "mxfp4"])
def test_batch_equals_token_by_token(bench_gguf, prompt_tokens, tmp_path, kind):
    """Verifying a batch gives the logits of decoding the same tokens one at a time (what makes greedy
    speculation lossless). Attention and the other ops are llama.cpp's; this checks the whole model."""
    model = bench_gguf[f"target_{kind}"]
    batch, _ = run_logits(model, prompt_tokens[:16], OURS, tmp_path)
    single, _ = run_logits(model, prompt_tokens[:16], OURS, tmp_path, single=True)
    assert np.array_equal(batch, single), np.abs(batch - single).max()



def test_bf16_weights_used_where_the_file_maps_them(bench_gguf, prompt_tokens, tmp_path):
    """ASSISTANT_WEIGHTS=mapped: no copy of the BF16 matrices; our kernels read their rows in llama.cpp's
    mapping of the file. A 16-token batch gives the bits of decoding token by token, and the logits (of that
    batch and of a 40-token prompt) agree with the stock kernels' as the packed ones do."""
    model = bench_gguf["target_bf16"]
    mapped = dict(OURS, ASSISTANT_WEIGHTS="mapped")
    batch, info = run_logits(model, prompt_tokens[:16], mapped, tmp_path)
    assert "weights=mapped" in info["kernels"], info
    single, _ = run_logits(model, prompt_tokens[:16], mapped, tmp_path, single=True)
    assert np.array_equal(batch, single), np.abs(batch - single).max()
    for n, ours in ((16, batch), (40, run_logits(model, prompt_tokens, mapped, tmp_path)[0])):
        stock, _ = run_logits(model, prompt_tokens[:n], STOCK, tmp_path)
        spread = stock.std(axis=1, keepdims=True)
        assert np.abs(ours - stock).max() / spread.min() < 2e-2, n
        assert np.median(np.abs(ours - stock) / spread) < 2e-3, n
        assert (ours.argmax(axis=1) != stock.argmax(axis=1)).sum() <= max(1, 0.05 * n), n  # near-ties may part

@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bf16", "mxfp4"])
def test_greedy_output_identical_to_stock(bench_gguf, tmp_path, kind):
    """The bench prompts' greedy continuations are the same with our kernels and the stock ones."""
    from llama_cpp import Llama

    from assistant.bench.workloads import DEFAULT_PROMPTS
    from assistant.engine import backend

    backend.llama()  # the portable build's backends are modules, loaded from llama_cpp/lib first
    model = bench_gguf[f"target_{kind}"]
    tok = Llama(str(model), vocab_only=True, verbose=False)
    prompts = [json.loads(line) for line in DEFAULT_PROMPTS.read_text().splitlines()[:6]]
    differ = []
    for p in prompts:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in p["messages"])
        tokens = tok.tokenize((text + "<|im_start|>assistant\n").encode(), special=True)[-200:]
        _, ours = run_logits(model, tokens, OURS, tmp_path, greedy=48)
        _, stock = run_logits(model, tokens, STOCK, tmp_path, greedy=48)
        if ours["greedy"] != stock["greedy"]:
            differ.append(p["id"])
    assert not differ


# Each variant of the portable build loaded alone: its score for this CPU (0: it cannot run here) and, where
# it can, what our kernels in it say. One process, so the libraries never meet llama.cpp's loader.
VARIANT_PROBE = """
import ctypes, json, sys
out = {}
for path in sys.argv[1:]:
    lib = ctypes.CDLL(path)
    lib.assistant_kernels_describe.restype = ctypes.c_char_p
    score = lib.ggml_backend_score()
    out[path] = lib.assistant_kernels_describe().decode() if score else None
print(json.dumps(out))
"""


def test_every_cpu_variant_carries_our_kernels_choosing_by_cpuid():
    """The portable build: our kernels are in every CPU variant, and in each that runs on this CPU they take
    the same paths as in the variant llama.cpp chose, since they decide by CPUID, not by the variant."""
    from assistant.engine import backend

    variants = sorted(backend.lib_dir().glob("libggml-cpu-*.so"))
    if not variants:
        pytest.skip("a build without CPU variants (ASSISTANT_NATIVE_FLAVOUR=native)")
    probe = subprocess.run([sys.executable, "-c", VARIANT_PROBE, *map(str, variants)], capture_output=True, text=True,
                           env=dict(os.environ, **OURS), timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    described = json.loads(probe.stdout)
    runnable = {Path(path).name: text for path, text in described.items() if text is not None}
    chosen = backend.cpu_backend_library().name
    assert chosen in runnable and len(runnable) >= 2, runnable
    assert set(runnable.values()) == {runnable[chosen]}, runnable


@pytest.mark.skipif(shutil.which("qemu-x86_64") is None, reason="needs qemu-x86_64 (apt-get install qemu-user)")
def test_the_same_build_runs_on_a_cpu_without_avx2(demo_set):
    """One build for every CPU: under qemu-x86_64 as a Nehalem (SSE4.2, no AVX), llama.cpp loads its sse42
    variant, our kernels step aside for the stock ones (they have no path there), and the greedy answer is the
    one this CPU gives."""
    from assistant.engine import backend

    if not backend.cpu_variants():
        pytest.skip("a build without CPU variants (ASSISTANT_NATIVE_FLAVOUR=native)")
    assistant = [sys.executable, "-m", "assistant"]
    nehalem = ["qemu-x86_64", "-cpu", "Nehalem", *assistant]
    doctor = subprocess.run([*nehalem, "doctor"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "CPU variant            sse42 (libggml-cpu-sse42.so" in doctor.stdout, doctor.stdout + doctor.stderr[-2000:]
    assert "our kernels            mxfp4=stock q8=stock bf16=stock kquant=stock attention=stock (not in use)" in doctor.stdout
    generate = ["generate", "def fibonacci(n):", "-n", "12", "--raw"]
    there = subprocess.run([*nehalem, *generate], cwd=REPO, capture_output=True, text=True, timeout=600)
    here = subprocess.run([*assistant, *generate], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert there.returncode == 0 and here.returncode == 0, there.stderr[-2000:]
    assert there.stdout == here.stdout and here.stdout.strip()


def test_llama_cpps_quantized_types_run_on_this_cpu(tiny_checkpoint, prompt_tokens, tmp_path):
    """Q8_0 weights (an `assistant convert --types q8_0` file, or any GGUF a user imports from) go to llama.cpp's
    own kernels. Its AMX buffer type is left out of the build because it faulted on AMX CPUs (SIGILL): on every
    CPU the file must decode, with logits near the F16 file's."""
    from converters import convert

    written = convert(tiny_checkpoint("llama", std=0.05), outdir=tmp_path, name="tiny", types=("f16", "q8_0"),
                      progress=False)
    tokens = [t % 200 for t in prompt_tokens[:12]]
    f16, _ = run_logits(written["f16"], tokens, OURS, tmp_path)
    q8_0, _ = run_logits(written["q8_0"], tokens, OURS, tmp_path)
    assert np.isfinite(q8_0).all()
    assert np.abs(q8_0 - f16).max() <= 0.05 * np.abs(f16).max()


USER_CODE = """
import itertools, json, sys
import llama_cpp

llm = llama_cpp.Llama(sys.argv[1], n_ctx=128, verbose=False)
prompt = [int(token) for token in sys.argv[2].split(",")]
print(json.dumps(list(itertools.islice(llm.generate(prompt, temp=0.0), int(sys.argv[3])))))
"""


def test_llama_cpp_on_its_own_loads_a_model_and_generates_as_upstreams_does(tiny_checkpoint, prompt_tokens, tmp_path):
    """Code of the user's in the same environment uses llama_cpp as it would the stock package: importing it
    loads the best CPU backend from llama_cpp/lib (the variants are modules there), quietly, so ``Llama(path)``
    loads a model and generates; the greedy tokens are those our engine gives for the same file."""
    from converters import convert

    written = convert(tiny_checkpoint("qwen2"), outdir=tmp_path, name="tiny", types=("bf16",), progress=False)
    tokens = prompt_tokens[:12]
    clean = {name: value for name, value in os.environ.items() if not name.startswith("ASSISTANT_")}
    user = subprocess.run([sys.executable, "-c", USER_CODE, str(written["bf16"]), ",".join(map(str, tokens)), "6"],
                          cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=300)
    assert user.returncode == 0, user.stderr[-2000:]
    assert user.stderr == ""  # no "no backends are loaded", and no line per backend module either
    _, ours = run_logits(written["bf16"], tokens, {}, tmp_path, greedy=6)
    assert json.loads(user.stdout) == ours["greedy"]


def test_our_engine_keeps_the_backends_llama_cpp_loaded():
    """Importing llama_cpp loaded the CPU variant and RPC; the engine runs on them, loading nothing twice."""
    from assistant.engine import backend

    code = ("import ctypes, llama_cpp; from assistant.engine import backend; "
            "count = backend._loaded('libggml').ggml_backend_reg_count; count.restype = ctypes.c_size_t; "
            "cpu = lambda: backend._library_holding(backend.ggml_functions()[1].ggml_backend_reg_by_name(b'CPU')); "
            "print(count(), cpu()); backend.cpu_backend_library(); print(count(), cpu())")
    clean = {name: value for name, value in os.environ.items() if not name.startswith("ASSISTANT_")}
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=clean, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    at_import, in_use = run.stdout.splitlines()
    assert at_import == in_use and at_import.startswith("2 ") and Path(in_use.split()[1]).parent == backend.lib_dir()


def test_measured_kernel_choices_are_kept_for_the_machine(tmp_path):
    """A choice our kernels make by timing (vdpbf16ps or widening + FMA, on CPUs with AVX512-BF16) decides the
    logits' bits, so the first process's verdict is kept in the file ASSISTANT_KERNEL_CHOICES names and later
    processes take it, whatever they would measure (ASSISTANT_BF16_TEST_NO_AMX: an AMX Xeon measures too).
    A CPU without AVX512-BF16 measures nothing, and nothing is written."""
    from assistant.cpu import this_cpu

    choices = tmp_path / "choices.txt"

    def bf16_path() -> str:
        code = "from assistant.engine.batch_invariance import kernels_in_use; print(kernels_in_use()['bf16'])"
        env = dict(os.environ, ASSISTANT_KERNEL_CHOICES=str(choices), ASSISTANT_BF16_TEST_NO_AMX="1")
        env.pop("ASSISTANT_BF16_TEST_DOT_FASTER", None)
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()[-1]

    first = bf16_path()
    if "avx512_bf16" not in this_cpu().flags:
        assert not choices.exists() and first != "avx512-bf16"
        return
    kept = dict(line.split("=") for line in choices.read_text().splitlines())
    assert kept.keys() == {"bf16-verify-dot", "bf16-prompt-dot"} and set(kept.values()) <= {"0", "1"}
    assert kept["bf16-verify-dot"] == str(int(first == "avx512-bf16"))
    for verdict, expected in (("0", "avx512"), ("1", "avx512-bf16"), ("0", "avx512")):
        text = f"bf16-prompt-dot=1\nbf16-verify-dot={verdict}\n"
        choices.write_text(text)
        assert bf16_path() == expected
        assert choices.read_text() == text


# ---------------------------------------------------------------- Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (q8-gemm.h)

Q8_KINDS = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")


@pytest.fixture(scope="module")
def q8_models(bench_gguf, tmp_path_factory) -> dict[str, Path]:
    """The bench target quantized by our build's llama-quantize, every matrix of one type (--pure)."""
    from native import build

    directory = build.cache_root() / build.build_key()
    quantize = directory / "bin" / "llama-quantize"
    if not quantize.exists():
        pytest.skip(f"no llama-quantize for the current sources ({directory}); run native/build.py")
    out = tmp_path_factory.mktemp("q8-models")
    models = {}
    for kind in Q8_KINDS:
        models[kind] = out / f"target.{kind}.gguf"
        done = subprocess.run([str(quantize), "--pure", str(bench_gguf["target_bf16"]), str(models[kind]), kind],
                              capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, LD_LIBRARY_PATH=str(directory / "bin")))
        assert done.returncode == 0, done.stderr[-2000:]
        types = {t.tensor_type.name for t in gguf.GGUFReader(models[kind]).tensors if len(t.shape) == 2}
        assert types == {kind}, types
    return models


@pytest.mark.parametrize("kind", Q8_KINDS)
def test_q8_types_run_ours_and_decode_one_row_a_step(q8_models, kind):
    """Such a target has every matrix on our kernels, so the engine may decode it one row a step."""
    from assistant.engine.batch_invariance import single_rows_match_batches

    kernels = dict(part.split("=", 1) for part in _description().split())
    assert kernels["q8"] != "stock"
    assert single_rows_match_batches(q8_models[kind], kernels)
    assert not single_rows_match_batches(q8_models[kind], dict(kernels, q8="stock"))


@pytest.mark.parametrize("kind", Q8_KINDS)
def test_q8_batch_equals_token_by_token(q8_models, prompt_tokens, tmp_path, kind):
    """16 tokens verified as one batch give the bits of decoding them one at a time, and the greedy tokens
    generated one at a time are the argmax of the batch that evaluates them all at once."""
    model = q8_models[kind]
    batch, info = run_logits(model, prompt_tokens[:16], OURS, tmp_path)
    single, _ = run_logits(model, prompt_tokens[:16], OURS, tmp_path, single=True)
    assert "q8=stock" not in info["kernels"]
    assert np.array_equal(batch, single), np.abs(batch - single).max()
    prompt = prompt_tokens[:8]
    _, greedy = run_logits(model, prompt, OURS, tmp_path, greedy=16)
    whole, _ = run_logits(model, prompt + greedy["greedy"], OURS, tmp_path)
    assert whole[len(prompt) - 1:-1].argmax(axis=1).tolist() == greedy["greedy"]


@pytest.mark.parametrize("kind", Q8_KINDS)
def test_q8_logits_match_the_stock_kernels(q8_models, prompt_tokens, tmp_path, kind):
    """Stock quantizes activations to q8_0 (f16 scales, Q4_1: q8_1), ours to int8 with f32 scales; the same
    weights otherwise, so the logits agree to that rounding."""
    ours, info = run_logits(q8_models[kind], prompt_tokens, OURS, tmp_path)
    stock, stock_info = run_logits(q8_models[kind], prompt_tokens, STOCK, tmp_path)
    assert "q8=stock" not in info["kernels"] and "q8=stock" in stock_info["kernels"]
    spread = stock.std(axis=1, keepdims=True)
    assert np.abs(ours - stock).max() / spread.min() < 0.1
    assert np.median(np.abs(ours - stock) / spread) < 1e-2
    assert (ours.argmax(axis=1) == stock.argmax(axis=1)).mean() >= 0.95


@pytest.mark.parametrize("path", ["scalar", "avx2"])
def test_q8_forced_paths_give_the_default_bits_in_llama(q8_models, prompt_tokens, tmp_path, path):
    """The portable path and the AVX2 path (what a Zen 3 runs) inside llama.cpp: the default path's bits."""
    for kind in Q8_KINDS:
        default, _ = run_logits(q8_models[kind], prompt_tokens[:8], OURS, tmp_path)
        forced, info = run_logits(q8_models[kind], prompt_tokens[:8], dict(OURS, ASSISTANT_Q8_KERNEL=path), tmp_path)
        if f"q8={path}" not in info["kernels"]:
            pytest.skip(f"this CPU does not run the {path} path")
        assert np.array_equal(default, forced), kind


def test_mxfp4_weights_used_where_the_file_maps_them(bench_gguf, prompt_tokens, tmp_path):
    """ASSISTANT_WEIGHTS=mapped on an MXFP4 model: no copy of its matrices; each thread packs tiles of the mapped
    rows on the way, so the logits are the packed kernels' bit for bit, a batch's and a 40-token prompt's."""
    model = bench_gguf["target_mxfp4"]
    mapped = dict(OURS, ASSISTANT_WEIGHTS="mapped")
    for n in (1, 16, 40):
        ours, info = run_logits(model, prompt_tokens[:n], mapped, tmp_path)
        assert "weights=mapped" in info["kernels"], info
        packed, _ = run_logits(model, prompt_tokens[:n], OURS, tmp_path)
        assert np.array_equal(ours, packed), (n, np.abs(ours - packed).max())
