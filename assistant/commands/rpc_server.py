"""Lend this machine to another one's chain: run llama.cpp's ggml-rpc-server (built by our native build, so
from the same patched source) so that `assistant generate/serve --target-rpc HOST:PORT` there can put its
BF16 target here.

The RPC protocol has no authentication and no encryption: whoever reaches the port can load tensors and run
computations on this machine. It listens on 127.0.0.1 unless told otherwise, and listening on any other
address needs --allow-network. One client is served at a time."""

from __future__ import annotations

import ipaddress
import os
import sys

from assistant.errors import AssistantError

HELP = "run llama.cpp's RPC server, so another machine's chain can put its target here"
WARNING = ("WARNING: the RPC protocol has no authentication or encryption: anyone who can reach {where} can run "
           "computations on this machine and read what it holds. Use it only on a network you trust.")


def add_arguments(parser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="IPv4 address to listen on (default 127.0.0.1: this "
                        "machine only; anything else needs --allow-network)")
    parser.add_argument("--port", type=int, default=50052, help="port to listen on (default 50052)")
    parser.add_argument("--threads", type=int, help="CPU threads for the remote model (default: half the cores)")
    parser.add_argument("--allow-network", action="store_true", help="allow a --host other than loopback, "
                        "knowing that the protocol has no authentication")
    parser.add_argument("--cache", action="store_true", help="keep received tensors on disk "
                        "(~/.cache/llama.cpp/rpc), so the next load of the same model sends less")


def run(args) -> int:
    host = "127.0.0.1" if args.host == "localhost" else args.host
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        raise AssistantError(f"--host {args.host!r}: ggml-rpc-server needs an IPv4 address, e.g. 192.168.1.20") from None
    if not address.is_loopback and not args.allow_network:
        raise AssistantError(f"--host {host} would open the RPC server to the network, which has no authentication: "
                             "add --allow-network if that network is trusted")
    if not 0 < args.port < 65536 or (args.threads is not None and args.threads < 1):
        raise AssistantError("--port must be 1-65535 and --threads 1 or more")
    from assistant.engine.rpc_program import rpc_server_command

    command, environment = rpc_server_command(host, args.port, args.threads, args.cache)
    print(WARNING.format(where=f"{host}:{args.port}"), file=sys.stderr, flush=True)
    print(f"listening on {host}:{args.port}; elsewhere: assistant generate --target-rpc {host}:{args.port} … "
          "(Ctrl+C stops)", file=sys.stderr, flush=True)
    # The server replaces this process, so signals reach it directly; SIGPIPE stays ignored across exec as
    # Python set it (the server writes to clients that may have gone).
    os.execve(command[0], command, environment)
    return 1  # not reached
