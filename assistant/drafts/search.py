"""Candidate drafts made from a target's own file: casts to fewer bits by our build's llama-quantize, and blocks
dropped one at a time by a greedy search that keeps, at each step, the drop that loses the least agreement."""

from __future__ import annotations

import subprocess
from pathlib import Path

from assistant.drafts.agreement import Measured, measure
from assistant.drafts.blocks import block_count, without_blocks
from assistant.errors import AssistantError

CASTS = ("Q4_K_M", "Q3_K_M", "Q2_K")  # llama-quantize's file types, from 4.5 down to 2.6 bits a weight


def cast(source: Path, file_type: str, workdir: Path) -> Path:
    """``source`` re-quantized to ``file_type`` by our build's llama-quantize, in ``workdir`` (made once)."""
    from native import build

    out = workdir / f"{source.stem}.{file_type.lower()}.gguf"
    if out.exists():
        return out
    partial = out.with_suffix(".part")
    tool = build.ensure_built() / "bin" / "llama-quantize"
    done = subprocess.run([str(tool), str(source), str(partial), file_type], capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise AssistantError(f"{source}: llama-quantize could not make {file_type} ({last})")
    partial.rename(out)
    return out


def dropped_blocks(source: Path, references, n_vocab: int, workdir: Path, steps: int, threads=None,
                   say=lambda text: None, step=lambda number: None) -> list[tuple[frozenset[int], Measured]]:
    """Greedy block selection: at each of ``steps`` steps every remaining block is tried out (dropped on top of
    the blocks dropped so far) and the one whose loss costs the least agreement is dropped for good. One
    (blocks dropped, measurement) per step; only each step's best file is kept in ``workdir``. ``step`` is told
    each step's number as it starts."""
    blocks = block_count(source)
    dropped: frozenset[int] = frozenset()
    chosen = []
    for number in range(1, min(steps, blocks - 1) + 1):
        step(number)
        best = None
        for block in range(blocks):
            if block in dropped:
                continue
            trial = dropped | {block}
            path = workdir / f"{source.stem}.without-{'-'.join(map(str, sorted(trial)))}.gguf"
            without_blocks(source, trial, path)
            measured = measure(path, references, n_vocab, threads)
            if best is None or measured.agreement > best[1].agreement:
                if best is not None:
                    best[1].path.unlink(missing_ok=True)
                best = (trial, measured)
            else:
                path.unlink(missing_ok=True)
        dropped = best[0]
        chosen.append(best)
        say(f"  step {number}: without blocks {sorted(dropped)}: agreement {best[1].agreement:.3f}")
    return chosen
