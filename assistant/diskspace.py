"""Free disk space, checked before a long job so it fails in the first second, not after an hour."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from assistant.errors import AssistantError


def format_size(nbytes: int) -> str:
    """Decimal units, as download pages and `df -H` show them."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def _existing(path: Path) -> Path:
    path = Path(path).expanduser().absolute()
    while not path.exists():
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer can still put under ``path`` (which need not exist yet)."""
    return shutil.disk_usage(_existing(path)).free


def require(needs: dict[Path, tuple[str, int]], job: str) -> None:
    """Refuse ``job`` unless every filesystem has room for what goes there.

    ``needs`` maps a destination directory to (what goes there, bytes); directories on the same
    filesystem are added up, so a download and its conversion on one disk are checked together.
    """
    by_device: dict[int, list[tuple[Path, str, int]]] = {}
    for directory, (what, nbytes) in needs.items():
        if nbytes > 0:
            by_device.setdefault(os.stat(_existing(directory)).st_dev, []).append((Path(directory), what, nbytes))
    for parts in by_device.values():
        total = sum(nbytes for _, _, nbytes in parts)
        free = free_bytes(parts[0][0])
        if total > free:
            detail = ", ".join(f"{what} {format_size(nbytes)} in {directory}" for directory, what, nbytes in parts)
            raise AssistantError(
                f"not enough disk space for {job}: needs {format_size(total)} ({detail}), "
                f"only {format_size(free)} free there"
            )
