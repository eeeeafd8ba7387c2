"""The two workloads, as GGUF files made on demand and cached.

(a) the trained bench pair as it is: real acceptance ratios, weights small enough to live in L3.
(b) the same pair padded with zero-output capacity (``assistant.bench.padding``): identical outputs and
    acceptance, but a 1.64 GB BF16 target, so decoding is bound by memory bandwidth as on a real 7B.

Shapes of (b). The hidden size (512) cannot grow without changing outputs, and llama.cpp's Qwen2 graph
assumes query width = hidden size (it rejects extra heads), so the target grows in depth and feed-forward
width: 28 layers (Qwen2.5-Coder-7B has 28), feed-forward 18432 wide; 820M parameters, 1.64 GB in BF16,
with attention a smaller share of each layer (2%) than in a 7B (13%). The draft grows the same way to
24 layers (0.5B has 24) and feed-forward 2816: 58.7M parameters, 1/14 of the target, as 0.5B is to 7B.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from assistant.errors import AssistantError

# The packaged toy pair (assistant/demo/) is the trained bench pair, and the prompts travel in the package too, so
# an installed assistant benchmarks with nothing beside it.
DEFAULT_MODELS = Path(__file__).resolve().parents[1] / "demo"
DEFAULT_PROMPTS = Path(__file__).resolve().parent / "prompts.jsonl"
# Directory names of the pair under --models: the benchmark's layout, or the packaged toy pair's.
LAYOUTS = (("bench-target", "bench-draft"), ("target", "draft"))


def pair_directories(models: Path) -> tuple[Path, Path]:
    """(target, draft) checkpoint directories under ``models``, in either layout."""
    models = Path(models)
    for target, draft in LAYOUTS:
        if (models / target / "config.json").is_file() and (models / draft / "config.json").is_file():
            return models / target, models / draft
    raise AssistantError(f"{models}: holds no checkpoint pair (--models needs bench-target/ and bench-draft/, "
                         "or target/ and draft/ as in the packaged toy pair)")

TARGET_PADDING = {"layers": 28, "intermediate": 18432}
DRAFT_PADDING = {"layers": 24, "intermediate": 2816}


@dataclass
class Workload:
    key: str
    title: str
    target: Path  # BF16 GGUF
    mxfp4: Path  # MXFP4 direct cast of the target
    draft: Path  # the small draft, BF16 GGUF (the paper's full-precision small draft)
    draft_mxfp4: Path  # the small draft in MXFP4 (what `assistant pull --draft` uses)
    checkpoints: dict[str, str] = field(default_factory=dict)
    parameters: dict[str, int] = field(default_factory=dict)
    padding: dict | None = None

    def paths(self) -> dict[str, Path]:
        return {"target": self.target, "mxfp4": self.mxfp4, "draft": self.draft, "draft-mxfp4": self.draft_mxfp4}

    def describe(self) -> dict:
        info = asdict(self)
        info.update({role: str(path) for role, path in self.paths().items()})
        info["file_bytes"] = {role: path.stat().st_size for role, path in self.paths().items()}
        return info


def prepare(key: str, models: Path, cache: Path, log=print) -> Workload:
    """The workload's GGUF files, converting (and for b, padding) only what is missing or stale."""
    from assistant.bench.padding import parameter_count

    target_hf, draft_hf = pair_directories(models)
    padding = None
    if key == "b":
        padding = {"target": TARGET_PADDING, "draft": DRAFT_PADDING}
        target_hf = _padded(target_hf, cache / "b" / "target-hf", TARGET_PADDING, log)
        draft_hf = _padded(draft_hf, cache / "b" / "draft-hf", DRAFT_PADDING, log)
    elif key != "a":
        raise AssistantError(f"unknown workload {key!r} (choose a, b or both)")
    target = _converted(target_hf, cache / key, "target", ("bf16", "mxfp4"), log)
    draft = _converted(draft_hf, cache / key, "draft", ("bf16", "mxfp4"), log)
    title = {"a": "(a) bench pair, cache-resident", "b": "(b) bench pair padded to 1.64 GB, memory-bound"}[key]
    return Workload(key, title, target["bf16"], target["mxfp4"], draft["bf16"], draft["mxfp4"],
                    checkpoints={"target": str(target_hf), "draft": str(draft_hf)},
                    parameters={"target": parameter_count(target_hf), "draft": parameter_count(draft_hf)},
                    padding=padding)


def _fingerprint(*parts) -> str:
    """Changes when a source checkpoint, the options, the converter's or the padding's code change."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(json.dumps(part, sort_keys=True, default=str).encode())
    converters = Path(__file__).resolve().parents[2] / "converters"
    for source in [*sorted(converters.glob("*.py")), Path(__file__).resolve().parent / "padding.py"]:
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def _stamp_ok(directory: Path, stamp: str, outputs: list[Path]) -> bool:
    marker = directory / ".stamp"
    return marker.is_file() and marker.read_text() == stamp and all(path.exists() for path in outputs)


def _checkpoint_identity(checkpoint: Path) -> list:
    return [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(checkpoint.iterdir()) if p.is_file()]


def _padded(source: Path, outdir: Path, dims: dict, log) -> Path:
    from assistant.bench.padding import pad

    stamp = _fingerprint(_checkpoint_identity(source), dims)
    if _stamp_ok(outdir, stamp, [outdir / "model.safetensors"]):
        return outdir
    log(f"[bench] padding {source.name} to {dims} -> {outdir}")
    pad(source, outdir, **dims)
    (outdir / ".stamp").write_text(stamp)
    return outdir


def _converted(checkpoint: Path, outdir: Path, name: str, types: tuple[str, ...], log) -> dict[str, Path]:
    from converters import convert

    outdir.mkdir(parents=True, exist_ok=True)
    outputs = {kind: outdir / f"{name}.{kind}.gguf" for kind in types}
    stamp = _fingerprint(_checkpoint_identity(checkpoint), types)
    marker_dir = outdir / f".{name}"
    marker_dir.mkdir(exist_ok=True)
    if _stamp_ok(marker_dir, stamp, list(outputs.values())):
        return outputs
    log(f"[bench] converting {checkpoint} -> {', '.join(p.name for p in outputs.values())}")
    written = convert(checkpoint, outdir=outdir, name=name, types=types, force=True)
    (marker_dir / ".stamp").write_text(stamp)
    return written


def load_prompts(path: Path, limit: int | None) -> list[dict]:
    """The first ``limit`` (all: None) prompts of a JSON-lines file of {'id', 'messages'}; one-line errors."""
    if not path.is_file():
        raise AssistantError(f"{path}: no such prompts file")
    prompts = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            prompt = json.loads(line)
        except json.JSONDecodeError as error:
            raise AssistantError(f"{path}:{number}: not JSON ({error.msg})") from None
        messages = prompt.get("messages") if isinstance(prompt, dict) else None
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and "role" in m and "content" in m for m in messages):
            raise AssistantError(f"{path}:{number}: needs 'messages', a list of {{'role', 'content'}} objects")
        prompt.setdefault("id", f"line{number}")
        prompts.append(prompt)
    if not prompts:
        raise AssistantError(f"{path}: no prompts")
    return prompts[:limit] if limit else prompts
