"""llama.cpp's plain decoding, measured by its own `llama-bench` on our GGUF file: the baseline a user of
llama.cpp compares us with.

One invocation per prompt measures two tests of the same length as that prompt: ``-p P`` (the prompt alone)
and ``-pg P,N`` (the prompt, then N new tokens decoded one at a time after it), so the decode rate is taken
with the prompt in the cache, as ours is. llama-bench evaluates random tokens, which costs the same as the
prompt's own; it warms up before timing and loads the model outside the timed part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from assistant.bench import llamacpp
from assistant.errors import AssistantError

PROGRAM = "llama-bench"


@dataclass
class PlainRun:
    prompt_tokens: int
    new_tokens: int
    seconds: float  # the prompt and the new tokens
    prompt_seconds: float  # the prompt alone
    command: str

    def as_result(self) -> dict:
        return {"text": None, "seconds": self.seconds, "prompt_seconds": self.prompt_seconds,
                "new_tokens": self.new_tokens, "prompt_tokens": self.prompt_tokens, "levels": [],
                "command": self.command}


def command(bin_dir: Path, target: Path, prompt_tokens: int, new_tokens: int, threads: int,
            repetitions: int = 1) -> list[str]:
    return [str(bin_dir / PROGRAM), "-m", str(target), "-p", str(prompt_tokens), "-n", "0",
            "-pg", f"{prompt_tokens},{new_tokens}", "-r", str(repetitions), "-t", str(threads), "-o", "json"]


def run(bin_dir: Path, target: Path, prompt_tokens: int, new_tokens: int, threads: int,
        env: dict[str, str] | None = None, repetitions: int = 1, timeout: float = 900) -> PlainRun:
    arguments = command(bin_dir, target, prompt_tokens, new_tokens, threads, repetitions)
    stdout, _ = llamacpp.run_program(bin_dir, arguments, env, timeout, target.name)
    prompt_ns, total_ns = parse(stdout, prompt_tokens, new_tokens)
    return PlainRun(prompt_tokens, new_tokens, total_ns / 1e9, prompt_ns / 1e9, llamacpp.shell_line(arguments, env))


def parse(stdout: str, prompt_tokens: int, new_tokens: int) -> tuple[float, float]:
    """Mean nanoseconds of the prompt test and of the prompt-and-generation test in llama-bench's JSON."""
    try:
        tests = json.loads(stdout)
        times = {(test["n_prompt"], test["n_gen"]): float(test["avg_ns"]) for test in tests}
    except (json.JSONDecodeError, TypeError, KeyError):
        raise AssistantError(f"{PROGRAM}: its output is not the JSON list of tests it was asked for") from None
    try:
        return times[(prompt_tokens, 0)], times[(prompt_tokens, new_tokens)]
    except KeyError:
        raise AssistantError(f"{PROGRAM}: no result for pp{prompt_tokens} and pg{prompt_tokens},{new_tokens} "
                             "in its output") from None
