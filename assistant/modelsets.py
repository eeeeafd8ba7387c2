"""Model sets: named chains of GGUF files, target first, each next one a cheaper draft of the one before.

The registry is one JSON file in the models directory, written atomically:

    {"default": "demo", "sets": {"demo": {"levels": [{"role": "target", "path": "demo.bf16.gguf"}, ...],
                                          "description": "what the set is, for `models list` and the chat"}}}

Paths are stored relative to the models directory when they live inside it, so the directory can move. A draft
made from the target's own weights (`assistant draft`) also stores the target's fingerprint as ``made_from``:
once the target file changes, the draft no longer tracks it and the set is refused until it is made again.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from assistant import home
from assistant.errors import AssistantError

REGISTRY_NAME = "modelsets.json"


class ModelSetError(AssistantError):
    """A model set that is missing, malformed or points at missing files; the message says which."""


@dataclass(frozen=True)
class Level:
    role: str  # "target", "mxfp4" (direct cast of the target), "draft" (a smaller model), or free text
    path: Path
    made_from: str | None = None  # fingerprint() of the target this draft was compressed from

    @property
    def size_bytes(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def output_projection(self) -> str | None:
        """The GGML type of the output projection its converter recorded (the MXFP4 copy's choice); an MXFP4
        copy from before the choice was recorded kept it BF16. None where neither says anything."""
        from converters import output_projection

        recorded = output_projection.recorded(self.path) if self.path.exists() else None
        if recorded is None and self.role == "mxfp4" and self.path.exists():
            return output_projection.UNRECORDED
        return recorded


@dataclass
class ModelSet:
    name: str
    levels: list[Level] = field(default_factory=list)
    target_rpc: str | None = None  # HOST:PORT of a ggml-rpc-server that runs the target; None: this machine
    description: str | None = None  # what the models are, where their names do not say it (the demo set)

    @property
    def target(self) -> Level:
        return self.levels[0]

    def missing_files(self) -> list[Path]:
        return [level.path for level in self.levels if not level.path.exists()]

    def stale_levels(self) -> list[Level]:
        """Drafts made from the target's weights (``made_from``) whose target file has changed since."""
        made = [level for level in self.levels[1:] if level.made_from]
        if not made or not self.target.path.exists():
            return []
        current = fingerprint(self.target.path)
        return [level for level in made if level.made_from != current]

    def check_fresh(self) -> None:
        """Refuse the set, in one line, where a draft made from its target no longer matches the target."""
        stale = self.stale_levels()
        if stale:
            raise ModelSetError(f"model set {self.name!r}: {stale[0].path} was made from an earlier version of "
                                f"{self.target.path}; run `assistant draft {self.name}` to make it again")

    def first(self, count: int) -> "ModelSet":
        """The chain cut to its first ``count`` levels (1 = the target alone)."""
        if not 1 <= count <= len(self.levels):
            raise ModelSetError(f"model set {self.name!r} has {len(self.levels)} levels, not {count}")
        return ModelSet(self.name, self.levels[:count], self.target_rpc, self.description)


FINGERPRINT_PIECES = 16
FINGERPRINT_PIECE_BYTES = 64 * 1024


def fingerprint(path: Path) -> str:
    """A digest of a file's size, its header and 16 pieces spread over it: one MiB read, cheap at every load,
    and different for any other model or re-quantization of it."""
    digest = hashlib.sha256()
    size = Path(path).stat().st_size
    digest.update(str(size).encode())
    with open(path, "rb") as file:
        for piece in range(FINGERPRINT_PIECES):
            file.seek(size * piece // FINGERPRINT_PIECES)
            digest.update(file.read(FINGERPRINT_PIECE_BYTES))
    return digest.hexdigest()[:32]


def registry_path(models_dir: Path | None = None) -> Path:
    return (models_dir or home.models_dir()) / REGISTRY_NAME


def _read(models_dir: Path) -> dict:
    path = registry_path(models_dir)
    if not path.exists():
        return {"default": None, "sets": {}}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ModelSetError(f"{path}: not a readable model-set registry ({error})") from None
    data.setdefault("default", None)
    data.setdefault("sets", {})
    return data


def _write(models_dir: Path, data: dict) -> None:
    path = registry_path(models_dir)
    partial = path.with_name(path.name + ".part")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(partial, path)


def _resolve(models_dir: Path, stored: str) -> Path:
    path = Path(stored)
    return path if path.is_absolute() else models_dir / path


def _store(models_dir: Path, path: Path) -> str:
    path = Path(path).resolve()
    try:
        return str(path.relative_to(models_dir.resolve()))
    except ValueError:
        return str(path)


def list_sets(models_dir: Path | None = None) -> tuple[list[ModelSet], str | None]:
    """All registered model sets and the name of the default one."""
    models_dir = models_dir or home.models_dir()
    data = _read(models_dir)
    sets = [
        ModelSet(name, [Level(lv["role"], _resolve(models_dir, lv["path"]), lv.get("made_from"))
                        for lv in entry["levels"]],
                 entry.get("target_rpc"), entry.get("description"))
        for name, entry in data["sets"].items()
    ]
    return sets, data["default"]


def get(name: str | None = None, models_dir: Path | None = None) -> ModelSet:
    """The named model set, or the default one when ``name`` is None."""
    sets, default = list_sets(models_dir)
    wanted = name or default
    if wanted is None:
        raise ModelSetError("no model set is registered: run `assistant convert` or `assistant pull` first")
    for model_set in sets:
        if model_set.name == wanted:
            return model_set
    known = ", ".join(s.name for s in sets) or "none"
    raise ModelSetError(f"no model set named {wanted!r} (registered: {known})")


def register(name: str, levels: list[Level], make_default: bool = False, models_dir: Path | None = None,
             description: str | None = None) -> ModelSet:
    """Add or replace a model set; the first one registered becomes the default."""
    if not levels:
        raise ModelSetError(f"model set {name!r} needs at least one level")
    models_dir = models_dir or home.models_dir()
    data = _read(models_dir)
    remote = data["sets"].get(name, {}).get("target_rpc")  # where the target runs is the machine's, kept
    data["sets"][name] = {"levels": [{"role": lv.role, "path": _store(models_dir, lv.path)}
                                     | ({"made_from": lv.made_from} if lv.made_from else {}) for lv in levels]}
    if remote:
        data["sets"][name]["target_rpc"] = remote
    if description:
        data["sets"][name]["description"] = description
    if make_default or data["default"] is None:
        data["default"] = name
    _write(models_dir, data)
    return ModelSet(name, list(levels), remote, description)


def remove(name: str, delete_files: bool = False, models_dir: Path | None = None) -> ModelSet:
    """Unregister a model set; with ``delete_files`` also delete GGUF files no other set uses."""
    models_dir = models_dir or home.models_dir()
    model_set = get(name, models_dir)
    data = _read(models_dir)
    del data["sets"][name]
    if data["default"] == name:
        data["default"] = next(iter(data["sets"]), None)
    _write(models_dir, data)
    if delete_files:
        for path in deletable_files(model_set, models_dir):
            path.unlink()
    return model_set


def deletable_files(model_set: ModelSet, models_dir: Path | None = None) -> list[Path]:
    """The set's files that no other registered set uses and that live in the models directory (files
    elsewhere were made by the user, e.g. `assistant convert --outdir`, and stay theirs)."""
    models_dir = (models_dir or home.models_dir()).resolve()
    others = {lv.path.resolve() for s in list_sets(models_dir)[0] if s.name != model_set.name for lv in s.levels}
    files = []
    for level in model_set.levels:
        path = level.path.resolve()
        if path.exists() and path not in others and path.is_relative_to(models_dir) and path not in files:
            files.append(path)
    return files


def set_target_rpc(name: str, endpoint: str | None, models_dir: Path | None = None) -> None:
    """Run the set's target on the ggml-rpc-server(s) at ``endpoint`` (HOST:PORT[=SHARE],...), or here again (None)."""
    from assistant.engine.devices import split_endpoints

    models_dir = models_dir or home.models_dir()
    get(name, models_dir)
    if endpoint is not None:
        split_endpoints(endpoint)
    data = _read(models_dir)
    data["sets"][name].pop("target_rpc", None)
    if endpoint is not None:
        data["sets"][name]["target_rpc"] = endpoint
    _write(models_dir, data)


def set_default(name: str, models_dir: Path | None = None) -> None:
    models_dir = models_dir or home.models_dir()
    get(name, models_dir)
    data = _read(models_dir)
    data["default"] = name
    _write(models_dir, data)
