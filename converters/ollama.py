"""Find the GGUF behind an ollama model name, so `assistant import ollama:NAME[:TAG]` reuses what ollama pulled.

ollama keeps each model as content-addressed blobs (``blobs/sha256-<hex>``) and one manifest per name and tag
(``manifests/<host>/<namespace>/<name>/<tag>``, JSON) whose layers name the blobs; the weights are the layer
of media type ``application/vnd.ollama.image.model``. The store is ``~/.ollama/models`` unless
``OLLAMA_MODELS`` says otherwise.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from assistant.errors import AssistantError

PREFIX = "ollama:"
MODEL_LAYER = "application/vnd.ollama.image.model"
DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"


def store() -> Path:
    override = os.environ.get("OLLAMA_MODELS")
    return Path(override).expanduser() if override else Path.home() / ".ollama" / "models"


def split_reference(reference: str) -> tuple[list[str], str]:
    """'qwen2.5-coder:7b' -> (['registry.ollama.ai', 'library', 'qwen2.5-coder'], '7b'), as ollama expands
    names: a bare name is in the library namespace, 'user/name' in the user's, 'host/user/name' elsewhere."""
    name, _, tag = reference.partition(":")
    parts = [part for part in name.split("/") if part]
    if not parts or len(parts) > 3 or any(part in (".", "..") for part in parts) or "/" in tag:
        raise AssistantError(f"{PREFIX}{reference}: not an ollama model name (NAME, NAME:TAG or NAMESPACE/NAME:TAG)")
    prefix = [DEFAULT_HOST, DEFAULT_NAMESPACE][: 3 - len(parts)]
    return prefix + parts, tag or DEFAULT_TAG


def installed(root: Path) -> list[str]:
    """The names ollama shows for every manifest in the store, as NAME:TAG."""
    manifests = root / "manifests"
    names = []
    for path in sorted(manifests.glob("*/*/*/*")):
        host, namespace, name, tag = path.relative_to(manifests).parts
        shown = name if (host, namespace) == (DEFAULT_HOST, DEFAULT_NAMESPACE) else (
            f"{namespace}/{name}" if host == DEFAULT_HOST else f"{host}/{namespace}/{name}")
        names.append(f"{shown}:{tag}")
    return names


def resolve(reference: str) -> Path:
    """The weights blob of ``NAME[:TAG]`` in the ollama store."""
    root = store()
    parts, tag = split_reference(reference)
    manifest = root.joinpath("manifests", *parts, tag)
    if not manifest.is_file():
        known = ", ".join(installed(root)[:20]) or "none"
        raise AssistantError(f"{manifest}: no ollama model {reference!r} (installed in {root}: {known})")
    try:
        layers = json.loads(manifest.read_text()).get("layers") or []
        digest = next(layer["digest"] for layer in layers if layer.get("mediaType") == MODEL_LAYER)
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        raise AssistantError(f"{manifest}: not an ollama manifest") from None
    except StopIteration:
        raise AssistantError(f"{manifest}: the manifest has no model weights layer ({MODEL_LAYER})") from None
    if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise AssistantError(f"{manifest}: unexpected blob digest {digest!r}")
    blob = root / "blobs" / digest.replace(":", "-")
    if not blob.is_file():
        raise AssistantError(f"{blob}: the weights blob of ollama model {reference!r} is missing")
    return blob
