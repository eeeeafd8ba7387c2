"""Fetch what conversion reads from a Hugging Face model repository, and say plainly why when it cannot.

Files go to the huggingface-hub cache (shared with other tools; finished files are never fetched twice).
They are downloaded one at a time in the calling thread, so Ctrl-C stops at once and leaves no partial file.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from assistant.diskspace import format_size
from assistant.errors import AssistantError

# Besides the weights, what the converter reads (tokenizer.model: SentencePiece repositories such as Llama 2).
SIDE_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
)

# Pairs that share a tokenizer; suggested when `--draft` is omitted, never fetched without being asked.
KNOWN_DRAFTS = {
    "qwen/qwen2.5-coder-1.5b-instruct": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "qwen/qwen2.5-coder-3b-instruct": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "qwen/qwen2.5-coder-7b-instruct": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "qwen/qwen2.5-coder-14b-instruct": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "qwen/qwen2.5-coder-32b-instruct": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "qwen/qwen2.5-7b-instruct": "Qwen/Qwen2.5-0.5B-Instruct",
    "meta-llama/llama-2-7b-chat-hf": "JackFram/llama-68m",
    "meta-llama/llama-2-13b-chat-hf": "JackFram/llama-68m",
}


def known_draft(repo_id: str) -> str | None:
    return KNOWN_DRAFTS.get(repo_id.lower())


@dataclass
class RemoteFile:
    name: str
    size: int
    cached: bool


@dataclass
class RepoPlan:
    """The files of one repository at one commit that a pull needs, and which are already cached."""

    repo_id: str
    revision: str
    commit: str
    files: list[RemoteFile]

    @property
    def weights_bytes(self) -> int:
        return sum(f.size for f in self.files if f.name.endswith(".safetensors"))

    @property
    def download_bytes(self) -> int:
        return sum(f.size for f in self.files if not f.cached)


def endpoint() -> str:
    """Read at call time (huggingface-hub reads HF_ENDPOINT once, at import)."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def cache_dir() -> Path:
    """The huggingface-hub cache, resolved the way the library does, but at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    hf_home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface"
    return Path(hf_home).expanduser() / "hub"


def select_files(repo_id: str, revision: str, names: list[str]) -> list[str]:
    """Root-level weights and side files; prefers `model*.safetensors` over duplicates like `consolidated.safetensors`."""
    root = [n for n in names if "/" not in n]
    weights = [n for n in root if n.endswith(".safetensors")]
    weights = [n for n in weights if n.startswith("model")] or weights
    if not weights:
        shown = ", ".join(sorted(root)[:8]) or "no files"
        raise AssistantError(
            f"{repo_id} (revision {revision}) has no .safetensors weights ({shown}); "
            "`assistant pull` converts safetensors checkpoints only"
        )
    if "config.json" not in root:
        raise AssistantError(f"{repo_id} (revision {revision}) has no config.json, so it is not a transformers checkpoint")
    for needed in ("tokenizer.json", "tokenizer_config.json"):
        if needed not in root:
            alone = " (tokenizer.model alone is not supported)" if "tokenizer.model" in root else ""
            raise AssistantError(f"{repo_id} (revision {revision}) has no {needed}{alone}; the converter needs it")
    return sorted(weights) + [n for n in SIDE_FILES if n in root]


def plan(repo_id: str, revision: str | None = None) -> RepoPlan:
    """Ask the Hub for the repository's files and sizes, pinned to the commit the revision points at now."""
    from huggingface_hub import HfApi, try_to_load_from_cache

    revision = revision or "main"
    with hub_errors(repo_id, revision):
        info = HfApi(endpoint=endpoint()).model_info(repo_id, revision=revision, files_metadata=True)
    sizes = {s.rfilename: (s.size if s.size is not None else (s.lfs.size if s.lfs else 0)) for s in info.siblings or []}
    files = []
    for name in select_files(repo_id, revision, list(sizes)):
        cached = try_to_load_from_cache(repo_id, name, cache_dir=cache_dir(), revision=info.sha)
        files.append(RemoteFile(name, sizes[name], isinstance(cached, str)))
    return RepoPlan(repo_id, revision, info.sha, files)


def download(plan: RepoPlan, out=None, weights: bool = True) -> Path:
    """Fetch the planned files not yet cached (``weights=False``: all but the weights); returns the snapshot
    directory holding them."""
    from huggingface_hub import hf_hub_download

    out = out or sys.stdout
    snapshot = None
    for number, remote in enumerate(plan.files, 1):
        if not weights and remote.name.endswith(".safetensors"):
            continue
        if not remote.cached:
            print(f"  [{number}/{len(plan.files)}] {remote.name} ({format_size(remote.size)})", file=out, flush=True)
        with hub_errors(plan.repo_id, plan.revision, remote.name):
            path = hf_hub_download(
                plan.repo_id, remote.name, revision=plan.commit, cache_dir=cache_dir(), endpoint=endpoint()
            )
        snapshot = Path(path).parent
    return snapshot


def _token_present() -> bool:
    from huggingface_hub import get_token

    return get_token() is not None


def _is_network_error(error: BaseException) -> bool:
    # huggingface-hub has used requests, httpx and httpx2 across its majors: match by origin, not by class.
    return any(cls.__module__.split(".")[0] in ("httpx", "httpx2", "requests", "urllib3") for cls in type(error).__mro__)


@contextmanager
def hub_errors(repo_id: str, revision: str, filename: str | None = None):
    """Turn huggingface-hub's exceptions into one-line messages that say what to do."""
    from huggingface_hub import errors

    where = f"{repo_id}/{filename}" if filename else repo_id
    page = f"{endpoint()}/{repo_id}"
    try:
        yield
    except errors.GatedRepoError as error:
        if (error.response is not None and error.response.status_code == 403) or _token_present():
            raise AssistantError(
                f"{repo_id} is gated and the Hugging Face token in use has no access: "
                f"accept its terms at {page} with that account"
            ) from None
        raise AssistantError(
            f"{repo_id} is gated: accept its terms at {page}, then set HF_TOKEN or run `hf auth login`"
        ) from None
    except errors.RepositoryNotFoundError:
        raise AssistantError(
            f"{repo_id}: no such model repository on {endpoint()} "
            "(check the name; a private one needs HF_TOKEN or `hf auth login`)"
        ) from None
    except errors.RevisionNotFoundError:
        raise AssistantError(f"{repo_id}: revision {revision!r} not found (a branch, tag or commit)") from None
    except getattr(errors, "RemoteEntryNotFoundError", errors.EntryNotFoundError):  # renamed in huggingface-hub 1.x
        raise AssistantError(f"{where}: not found on {endpoint()} at revision {revision}") from None
    except errors.HFValidationError as error:
        raise AssistantError(f"{repo_id!r} is not a Hugging Face repository id ({error})") from None
    except errors.HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else "?"
        if status == 401:
            raise AssistantError(f"{repo_id}: the Hugging Face token was rejected (HF_TOKEN or `hf auth login`)") from None
        raise AssistantError(f"{where}: the Hub answered HTTP {status}; try again later") from None
    except Exception as error:
        if isinstance(error, OSError) or _is_network_error(error):
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise AssistantError(
                f"downloading {where} from {endpoint()} failed ({reason}); run the same command again to resume"
            ) from None
        raise
