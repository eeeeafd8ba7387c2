"""Build llama-cpp-python from its pinned PyPI sdist with our kernels, cached by a hash of every input.

The result lives outside the repository (``ASSISTANT_NATIVE_CACHE``, default ``~/.cache/assistant/native``):

    <cache>/sdist/llama_cpp_python-0.3.36.tar.gz   the download, checked against its sha256
    <cache>/src-portable/, <cache>/src/             the sdist with our files added and our patch applied
    <cache>/build-portable/, <cache>/build/         CMake's build trees, kept so a kernel edit rebuilds one file
    <cache>/<key>/llama_cpp_python-*.whl            the wheel for this exact set of inputs
    <cache>/<key>/bin/                              llama-bench, llama-speculative-simple, llama-completion,
                                                    llama-quantize, test-backend-ops, ggml-rpc-server and the
                                                    shared libraries they run with

Two flavours, each with its own source and build tree (``ASSISTANT_NATIVE_FLAVOUR`` or ``--flavour``):
``portable`` (the default) builds ggml's CPU backend once per CPU family as modules, and the process loads the
best one for its CPU when it starts, so one wheel serves every x86-64 or ARM64 machine; ``native`` is the
single ``-march=native`` build of before, for this machine only, kept to compare speeds.

Usage: ``python native/build.py [--flavour portable|native] [--install] [--print-dir]``. A second run with the
same inputs does nothing. Only the standard library is used, so it runs before any virtual environment exists.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

SDIST_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/"
    + SDIST_NAME
)
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"

NATIVE_DIR = Path(__file__).resolve().parent
KERNEL_SOURCES = NATIVE_DIR / "src"
PATCHES = NATIVE_DIR / "patches"
KERNEL_DEST = Path("vendor/llama.cpp/ggml/src/ggml-cpu/assistant")
TOOLS = ("llama-bench", "llama-speculative-simple", "llama-completion", "llama-quantize", "test-backend-ops",
         "ggml-rpc-server")

# Tools are off for the wheel (it ships only libraries) and switched on afterwards in the same build tree,
# so the second configure reuses every object and compiles just these programs.
# The RPC backend lets a level live on another machine (ggml-rpc-server runs there); RDMA stays off so that
# every build speaks plain TCP whatever libraries the build machine has.
COMMON_ARGS = ["-DLLAVA_BUILD=OFF", "-DLLAMA_CURL=OFF", "-DGGML_RPC=ON", "-DGGML_RPC_RDMA=OFF"]
FLAVOURS = {
    # every CPU variant llama.cpp defines for the architecture (14 on x86-64, from plain x86-64 to AMX): each
    # is ggml's CPU code alone; our kernels are compiled once for all
    "portable": ["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"],
    "native": ["-DGGML_NATIVE=ON"],
}
FLAVOUR_VARIABLE = "ASSISTANT_NATIVE_FLAVOUR"
TOOL_SWITCHES = ("LLAMA_BUILD_TOOLS", "LLAMA_BUILD_EXAMPLES", "LLAMA_BUILD_TESTS")
# llama.cpp's CMake also installs its libraries, headers and CPU variants at the wheel's root, which pip puts
# in site-packages/{lib,include,bin}; llama_cpp loads only its own llama_cpp/lib
WHEEL_EXCLUDE = "lib/**;include/**;bin/**"
MARKER = "assistant-native-key"  # written beside the installed llama_cpp package: which build it came from


def cache_root() -> Path:
    return Path(os.environ.get("ASSISTANT_NATIVE_CACHE", Path.home() / ".cache" / "assistant" / "native"))


def log(message: str) -> None:
    print(f"[native] {message}", file=sys.stderr, flush=True)


def flavour() -> str:
    name = os.environ.get(FLAVOUR_VARIABLE, "") or "portable"
    if name not in FLAVOURS:
        raise SystemExit(f"error: {FLAVOUR_VARIABLE}={name}: expected one of {', '.join(FLAVOURS)}")
    return name


def cmake_args() -> list[str]:
    return FLAVOURS[flavour()] + COMMON_ARGS


def trees(root: Path) -> tuple[Path, Path]:
    """(source tree, CMake build tree) of the flavour: one pair each, so that switching flavours (or branches
    with different patches) never rebuilds the other's objects. The native flavour keeps the names it had
    when it was the only one, so existing trees stay warm."""
    suffix = "" if flavour() == "native" else f"-{flavour()}"
    return root / f"src{suffix}", root / f"build{suffix}"


def cpu_flags() -> str:
    """-march=native makes ggml's own code depend on the CPU, so the native flavour's key includes its flags."""
    sys.path.insert(0, str(NATIVE_DIR.parent))
    from assistant.cpu import this_cpu  # standard library only, like this script

    this = this_cpu()
    return " ".join(sorted(this.flags)) or this.machine


def compiler_version() -> str:
    try:
        out = subprocess.run(["c++", "--version"], capture_output=True, text=True, check=False).stdout
        return out.splitlines()[0] if out else "unknown"
    except OSError:
        return "unknown"


def input_files() -> list[Path]:
    return sorted([*KERNEL_SOURCES.rglob("*"), *PATCHES.glob("*.patch"), Path(__file__).resolve()])


def build_key() -> str:
    digest = hashlib.sha256()
    build_cpu = cpu_flags() if flavour() == "native" else ""
    for part in (SDIST_SHA256, " ".join(cmake_args()), build_cpu, compiler_version(), sys.version):
        digest.update(part.encode() + b"\0")
    for path in input_files():
        if path.is_file():
            digest.update(str(path.relative_to(NATIVE_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def fetch_sdist(root: Path) -> Path:
    target = root / "sdist" / SDIST_NAME
    if target.exists() and sha256(target) == SDIST_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"downloading {SDIST_NAME}")
    partial = target.with_suffix(".part")
    with urllib.request.urlopen(SDIST_URL, timeout=120) as response, open(partial, "wb") as out:
        shutil.copyfileobj(response, out)
    actual = sha256(partial)
    if actual != SDIST_SHA256:
        partial.unlink()
        raise SystemExit(f"error: {SDIST_URL}: sha256 {actual}, expected {SDIST_SHA256}")
    partial.rename(target)
    return target


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_if_changed(path: Path, data: bytes) -> None:
    """Keep mtimes of unchanged files so the kept build tree recompiles only what changed."""
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def prepare_source(root: Path, sdist: Path) -> Path:
    """Unpack the pristine sdist once, then lay our files and patch over it, touching only what differs."""
    pristine = root / "pristine"
    stamp = pristine / ".sha256"
    if not stamp.exists() or stamp.read_text() != SDIST_SHA256:
        shutil.rmtree(pristine, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            with tarfile.open(sdist) as tar:
                tar.extractall(tmp, filter="data")
            (Path(tmp) / f"llama_cpp_python-{SDIST_VERSION}").rename(pristine)
        stamp.write_text(SDIST_SHA256)

    with tempfile.TemporaryDirectory(dir=root) as tmp:
        staged = Path(tmp)
        patched = [line.split()[1][2:] for p in sorted(PATCHES.glob("*.patch"))
                   for line in p.read_text().splitlines() if line.startswith("+++ ")]
        for rel in patched:
            (staged / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pristine / rel, staged / rel)
        for patch in sorted(PATCHES.glob("*.patch")):
            run(["patch", "-p1", "--quiet", "--forward", "-i", str(patch)], cwd=staged)

        src = trees(root)[0]
        if not src.exists():
            shutil.copytree(pristine, src, symlinks=True)
        for rel in patched:
            write_if_changed(src / rel, (staged / rel).read_bytes())
    dest = src / KERNEL_DEST
    wanted = {p.relative_to(KERNEL_SOURCES) for p in KERNEL_SOURCES.rglob("*") if p.is_file()}
    for rel in wanted:
        write_if_changed(dest / rel, (KERNEL_SOURCES / rel).read_bytes())
    for stale in [p for p in dest.rglob("*") if p.is_file() and p.relative_to(dest) not in wanted]:
        stale.unlink()
    return src


def run(cmd: list[str], cwd: Path | None = None, env: dict | None = None, logfile: Path | None = None) -> None:
    if logfile is None:
        result = subprocess.run(cmd, cwd=cwd, env=env)
    else:
        with open(logfile, "ab") as out:
            result = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        where = f" (log: {logfile})" if logfile else ""
        raise SystemExit(f"error: {' '.join(cmd[:3])} ... failed with exit code {result.returncode}{where}")


def build(root: Path, key: str) -> Path:
    started = time.monotonic()
    sdist = fetch_sdist(root)
    src = prepare_source(root, sdist)
    build_dir = trees(root)[1]
    staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=root))
    logfile = staging / "build.log"
    jobs = str(os.cpu_count() or 2)
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=jobs,
               CMAKE_ARGS=" ".join(cmake_args() + [f"-D{s}=OFF" for s in TOOL_SWITCHES]))
    log(f"building llama-cpp-python {SDIST_VERSION} ({flavour()}) with our kernels (log: {logfile})")
    run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--wheel-dir", str(staging),
         "-C", f"build-dir={build_dir}", "-C", "cmake.build-type=Release", "-C", f"wheel.exclude={WHEEL_EXCLUDE}"],
        env=env, logfile=logfile)

    log(f"building {', '.join(TOOLS)}")
    run(["cmake", str(build_dir), *[f"-D{s}=ON" for s in TOOL_SWITCHES]], logfile=logfile)
    run(["cmake", "--build", str(build_dir), "--parallel", jobs, "--target", *TOOLS], logfile=logfile)
    bin_dir = staging / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        shutil.copy2(build_dir / "bin" / tool, bin_dir / tool)
    for lib in build_dir.rglob("lib*.so*"):
        if lib.is_file() and lib.parent.name == "bin":
            shutil.copy2(lib, bin_dir / lib.name)
    info = {"key": key, "flavour": flavour(), "sdist": SDIST_NAME, "sdist_sha256": SDIST_SHA256,
            "cmake_args": cmake_args(), "compiler": compiler_version(),
            "seconds": round(time.monotonic() - started, 1)}
    (staging / "build-info.json").write_text(json.dumps(info, indent=2) + "\n")
    final = root / key
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    log(f"built in {info['seconds']} s: {final}")
    return final


def ensure_built() -> Path:
    """The cache directory for the current inputs, building it when missing (one build at a time)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    key = build_key()
    done = root / key
    if (done / "build-info.json").exists():
        return done
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (done / "build-info.json").exists():
            return done
        return build(root, key)


def wheel_in(directory: Path) -> Path:
    return next(directory.glob("llama_cpp_python-*.whl"))


def installed_key() -> str | None:
    """The key of the build whose wheel is installed in this interpreter (``install`` leaves it beside it)."""
    try:
        import llama_cpp  # noqa: F401  (only to find where it lives)
    except ImportError:
        return None
    marker = Path(llama_cpp.__file__).parent / MARKER
    return marker.read_text().strip() if marker.exists() else None


def tools_dir() -> Path:
    """bin/ (llama.cpp's programs and their libraries) of the installed build, else of the build of the
    current inputs, made if missing."""
    key = installed_key()
    if key and (cache_root() / key / "bin").is_dir():
        return cache_root() / key / "bin"
    return ensure_built() / "bin"


def install(directory: Path) -> None:
    """Install the wheel into the running interpreter unless this exact build is already there."""
    if installed_key() == directory.name:
        return
    log(f"installing {wheel_in(directory).name}")
    run([sys.executable, "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps",
         str(wheel_in(directory))])
    run([sys.executable, "-m", "pip", "install", "--quiet", "numpy", "typing-extensions", "diskcache", "jinja2"])
    out = subprocess.run([sys.executable, "-c", "import llama_cpp, os; print(os.path.dirname(llama_cpp.__file__))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    (Path(out) / MARKER).write_text(directory.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flavour", choices=FLAVOURS, help=f"portable (default) or native (-march=native); "
                        f"also {FLAVOUR_VARIABLE}")
    parser.add_argument("--install", action="store_true", help="install the wheel into this Python")
    parser.add_argument("--print-dir", action="store_true", help="print the build directory and exit")
    args = parser.parse_args()
    if args.flavour:
        os.environ[FLAVOUR_VARIABLE] = args.flavour
    directory = ensure_built()
    if args.install:
        install(directory)
    if args.print_dir:
        print(directory)


if __name__ == "__main__":
    main()
