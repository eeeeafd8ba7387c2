"""llama.cpp's own speculative decoding, `llama-speculative-simple`, run on our GGUF files: with a draft
model (``--spec-type draft-simple``) or with its n-gram lookup in the text so far (``ngram-simple``, no draft).

It loads both models on every run, so its wall time is mostly loading; we use the times it prints itself
("encoded N tokens in S seconds", "decoded N tokens in S seconds"): prompt plus generation, which is what
our pipelines' timings cover too. Its stdout echoes the prompt, then the generated text, between blank
lines; that text is what the identity check compares.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from assistant import cpu
from assistant.engine import backend
from assistant.errors import AssistantError

PROGRAM = "llama-speculative-simple"
ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
COUNTER = re.compile(r"^(?:\S+ \S+ )?(n_drafted|n_accept|n_predict)\s*=\s*(\d+)", re.MULTILINE)
ECHOED_BOS = re.compile(r"<[^<>\s]{1,32}>")
DRAFT, NGRAM = "draft-simple", "ngram-simple"
# llama.cpp's logger writes from a thread of its own that the program does not wait for at exit (its log.cpp
# leaks the logger on purpose, llama.cpp issue 22142), so a run on a small model, finishing fast on a busy
# machine, can lose its last lines of stderr, the timings among them: such a run is made again, up to this
# many times in all.
ATTEMPTS = 3
# What a user of plain llama.cpp runs: its own kernels, not the ones our native build adds.
STOCK_KERNELS = cpu.STOCK_KERNELS


class UnreadOutput(AssistantError):
    """The program ran, but its output lacks the lines we read (cut short at its exit, see ATTEMPTS)."""


@dataclass
class SpeculativeRun:
    text: str
    new_tokens: int
    prompt_tokens: int
    seconds: float  # encode + decode, as printed by the program
    prompt_seconds: float  # encode
    drafted: int
    accepted: int
    command: str = ""  # the command line as a shell would take it, environment settings first

    def as_result(self, draft_role: str, draft_length: int) -> dict:
        acceptance = self.accepted / self.drafted if self.drafted else 0.0
        rounds = self.new_tokens - self.accepted  # each verification yields its accepted drafts + one token
        tau = self.new_tokens / rounds if rounds > 0 else 0.0
        return {
            "text": self.text,
            "seconds": self.seconds,
            "prompt_seconds": self.prompt_seconds,
            "new_tokens": self.new_tokens,
            "prompt_tokens": self.prompt_tokens,
            "levels": [
                {"role": "target", "proposed": 0, "accepted": 0, "acceptance": 0.0, "mean_accepted_length": 0.0,
                 "seconds": 0.0},
                {"role": draft_role, "proposed": self.drafted, "accepted": self.accepted, "acceptance": acceptance,
                 "mean_accepted_length": tau, "seconds": 0.0},
            ],
            "draft_length": draft_length,
        }


def command(bin_dir: Path, target: Path, draft: Path | None, prompt: str, max_tokens: int, draft_length: int,
            threads: int, n_ctx: int = 4096, spec_type: str = DRAFT, sampling: dict | None = None) -> list[str]:
    """The program's arguments: greedy, or ``sampling`` (temperature, top_p, seed; top-k and min-p off, as our
    levels sample), ``draft_length`` tokens at most per draft (a draft model's, or for ngram-simple, which takes
    no draft model, its own default lengths)."""
    arguments = [str(bin_dir / PROGRAM), "-m", str(target)]
    if spec_type == DRAFT:
        arguments += ["-md", str(draft), "--spec-type", DRAFT, "--spec-draft-n-max", str(draft_length),
                      "--spec-draft-n-min", "0", "-td", str(threads), "-tbd", str(threads)]
    else:
        arguments += ["--spec-type", spec_type]
    if sampling and sampling.get("temperature", 0) > 0:
        choosing = ["--temp", str(sampling["temperature"]), "--top-p", str(sampling.get("top_p", 1.0)), "--top-k", "0",
                    "--min-p", "0", "--seed", str(sampling.get("seed") or 0)]
    else:
        choosing = ["--temp", "0", "--top-k", "1"]
    return arguments + ["--no-escape", "-p", prompt, "-n", str(max_tokens), "-t", str(threads), "-tb", str(threads),
                        *choosing, "-c", str(n_ctx), "-b", str(n_ctx)]


def run(bin_dir: Path, target: Path, draft: Path | None, prompt: str, max_tokens: int, draft_length: int,
        threads: int, n_ctx: int = 4096, env: dict[str, str] | None = None, timeout: float = 900,
        spec_type: str = DRAFT, sampling: dict | None = None) -> SpeculativeRun:
    arguments = command(bin_dir, target, draft, prompt, max_tokens, draft_length, threads, n_ctx, spec_type, sampling)
    what = f"{target.name} + {draft.name}" if spec_type == DRAFT else f"{target.name} ({spec_type})"
    for attempt in range(1, ATTEMPTS + 1):
        stdout, stderr = run_program(bin_dir, arguments, env, timeout, what)
        try:
            result = parse(stdout, stderr, prompt)
            break
        except UnreadOutput:
            if attempt == ATTEMPTS:
                raise
    result.command = shell_line(arguments, env)
    return result


def run_program(bin_dir: Path, arguments: list[str], env: dict[str, str] | None, timeout: float,
                what: str) -> tuple[str, str]:
    """Run one of the native build's programs (``arguments[0]`` in ``bin_dir``) beside its libraries; its
    stdout and stderr, or an error naming the program, ``what`` it ran on and its last line of complaint."""
    program = Path(arguments[0]).name
    environment = dict(os.environ, **(env or {}))
    environment["LD_LIBRARY_PATH"] = f"{bin_dir}:{environment.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    with _program_dir(bin_dir, program) as program_dir:
        done = subprocess.run([str(program_dir / program), *arguments[1:]], capture_output=True, env=environment,
                              timeout=timeout)
    stdout = done.stdout.decode("utf-8", errors="replace")
    stderr = done.stderr.decode("utf-8", errors="replace")
    if done.returncode != 0:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit status {done.returncode}"
        raise AssistantError(f"{program} failed on {what}: {last}")
    return stdout, stderr


def shell_line(arguments: list[str], env: dict[str, str] | None = None) -> str:
    """The command as one would type it, the kernel settings it ran under first (ours are the default)."""
    chosen = {name: os.environ[name] for name in STOCK_KERNELS if name in os.environ} | (env or {})
    settings = [f"{name}={value}" for name, value in chosen.items()]
    return shlex.join([*settings, *arguments])


@contextlib.contextmanager
def _program_dir(bin_dir: Path, program: str = PROGRAM):
    """Where to run the program from: ``bin_dir``, or under ASSISTANT_CPU_VARIANT a copy of it holding only
    that CPU variant. ggml picks a variant among the libraries beside the executable it finds in /proc/self/exe,
    so the program is copied there (a link would resolve back) and the rest linked."""
    variant = backend.forced_variant()
    if not variant:
        yield bin_dir
        return
    with tempfile.TemporaryDirectory(prefix="assistant-variant-") as view:
        for path in bin_dir.iterdir():
            if path.name.startswith(backend.CPU_LIBRARY_PREFIX + "-") and backend.cpu_variant(path) != variant:
                continue
            if path.name == program:
                shutil.copy2(path, view)
            else:
                os.symlink(path, Path(view) / path.name)
        yield Path(view)


def parse(stdout: str, stderr: str, prompt: str) -> SpeculativeRun:
    encoded, decoded = ENCODED.search(stderr), DECODED.search(stderr)
    counters = {name: int(value) for name, value in COUNTER.findall(stderr)}
    if not encoded or not decoded or "n_drafted" not in counters:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else "nothing on stderr"
        raise UnreadOutput(f"{PROGRAM}: could not find its timing and acceptance lines in its output "
                             f"(its last line: {last.strip()[:200]})")
    body = stdout[2:] if stdout.startswith("\n\n") else stdout
    echoed = ECHOED_BOS.match(body)  # a BOS the prompt does not spell, echoed as its text (Gemma's "<bos>")
    if echoed and not body.startswith(prompt) and body.startswith(prompt, echoed.end()):
        body = body[echoed.end():]
    if not body.startswith(prompt):
        raise AssistantError(f"{PROGRAM}: its echo of the prompt differs from the prompt we gave it")
    text = body[len(prompt):]
    if text.endswith("\n\n"):
        text = text[:-2]
    return SpeculativeRun(
        text=text,
        new_tokens=int(decoded.group(1)),
        prompt_tokens=int(encoded.group(1)),
        seconds=float(encoded.group(2)) + float(decoded.group(2)),
        prompt_seconds=float(encoded.group(2)),
        drafted=counters["n_drafted"],
        accepted=counters.get("n_accept", 0),
    )
