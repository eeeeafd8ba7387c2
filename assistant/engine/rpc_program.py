"""ggml-rpc-server, the llama.cpp program that lends this machine to another one's chain: where it is installed
and how to start it (`assistant rpc-server` runs it; the remote bench stands a machine in with it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from assistant.errors import AssistantError

PROGRAM = "ggml-rpc-server"


def _program_dir() -> Path:
    """Beside llama.cpp's libraries in the bundle (packaging/), else among our native build's tools."""
    if getattr(sys, "frozen", False):
        from assistant.engine import backend

        return backend.lib_dir()
    from native import build

    return build.tools_dir()


def rpc_server_command(host: str, port: int, threads: int | None = None,
                       cache: bool = False) -> tuple[list[str], dict]:
    """ggml-rpc-server's command line and environment (it runs with the libraries built beside it)."""
    bin_dir = _program_dir()
    program = bin_dir / PROGRAM
    if not program.exists():
        raise AssistantError(f"{program}: not built (run `make setup` or native/build.py)")
    command = [str(program), "-H", host, "-p", str(port)]
    command += ["-t", str(threads)] if threads else []
    command += ["-c"] if cache else []
    libraries = f"{bin_dir}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    return command, {**os.environ, "LD_LIBRARY_PATH": libraries}
