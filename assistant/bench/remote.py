"""`assistant bench --remote`: the target on another machine, with the drafters here, at several network delays.

The other machine is stood in for by ggml-rpc-server processes in their own network namespace, reached over a
veth pair (where this process may make one: root and `ip`), else on loopback. Each process takes its own /30
and first removes the namespaces of benches that died before cleaning up (a leftover one holding the same
addresses would swallow the connections). A ``Relay`` in front of each
server adds the round-trip delay (``tc netem`` needs a kernel module that containers often lack) and counts
the bytes each way. The server serves one client at a time, so the two compared pipelines (the remote target
alone, and the whole chain over it) get servers of their own: one each, then two each holding half the
target's layers (a target split over two machines). Every answer is checked against the local target's.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

from assistant.bench import pairs
from assistant.bench.relay import Relay
from assistant.bench.summary import geomean
from assistant.errors import AssistantError

DELAYS_MS = (0.0, 2.0, 10.0)
SPLITS = (1, 2)  # servers sharing the target's layers
NETWORK = ipaddress.IPv4Network("10.231.0.0/16")  # split into /30s: this side .1, the stand-in machine .2
NAMESPACE_PREFIX = "assistant-bench-"
PORT = 50052


class RemoteMachine:
    """``count`` ggml-rpc-servers standing in for one remote machine; ``endpoints`` are where they listen."""

    def __init__(self, count: int, threads: int, say=print):
        from assistant.engine.rpc_program import rpc_server_command

        self.namespace = None
        self.servers: list[subprocess.Popen] = []
        self._starting, self._asked = False, None  # a server being started; a SIGTERM that came meanwhile
        self._terminate = self._clean_up_on_sigterm()
        prefix, host = [], "127.0.0.1"
        try:
            self.namespace = _make_namespace()
            prefix, host = ["ip", "netns", "exec", self.namespace], str(_addresses(os.getpid())[1])
            self.where = f"network namespace {self.namespace} over a veth pair"
        except (OSError, subprocess.CalledProcessError) as error:
            self.where = f"loopback (no network namespace: {error})"
        say(f"[bench] the remote machine: {self.where}")
        self.endpoints = []
        try:
            for index in range(count):
                port = PORT + index if self.namespace else _free_port()
                command, environment = rpc_server_command(host, port, threads)
                self._starting = True
                self.servers.append(subprocess.Popen(prefix + command, env=environment, stdout=subprocess.DEVNULL,
                                                     stderr=subprocess.DEVNULL))
                self._starting = False
                if self._asked is not None:
                    self._leave(self._asked)
                self.endpoints.append((host, port))
            for server, endpoint in zip(self.servers, self.endpoints):
                wait_listening(server, endpoint)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for server in self.servers:
            server.kill()
            server.wait()
        self.servers = []
        if self.namespace:
            subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True)
            self.namespace = None
        if self._terminate is not None:
            signal.signal(signal.SIGTERM, self._terminate)
            self._terminate = None

    def _clean_up_on_sigterm(self):
        """A SIGTERM removes the servers and the namespace, then ends the process as it would have (an exception
        raised from the handler would be lost where it lands in a ctypes callback, llama.cpp's log); returns the
        handler it replaced, or None where this thread may not set one."""
        if threading.current_thread() is not threading.main_thread():
            return None

        def clean_up_and_leave(number, frame):
            if self._starting:  # the server being started is not in self.servers yet: leave once it is
                self._asked = number
            else:
                self._leave(number)

        return signal.signal(signal.SIGTERM, clean_up_and_leave)

    def _leave(self, number: int) -> None:
        self.close()  # puts the previous handler back
        os.kill(os.getpid(), number)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _make_namespace() -> str:
    """A network namespace joined to this one by a veth pair; raises where this process may not make one."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise OSError("needs root and iproute2")
    _remove_leftover_namespaces()
    name = f"{NAMESPACE_PREFIX}{os.getpid()}"
    here, there = f"asb{os.getpid() % 10**6}h", f"asb{os.getpid() % 10**6}t"
    near, far = _addresses(os.getpid())
    steps = [["ip", "netns", "add", name],
             ["ip", "link", "add", here, "type", "veth", "peer", "name", there],
             ["ip", "link", "set", there, "netns", name],
             ["ip", "addr", "add", f"{near}/30", "dev", here],
             ["ip", "link", "set", here, "up"],
             ["ip", "-n", name, "addr", "add", f"{far}/30", "dev", there],
             ["ip", "-n", name, "link", "set", there, "up"],
             ["ip", "-n", name, "link", "set", "lo", "up"]]
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
    except subprocess.CalledProcessError:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)  # takes its end of the pair along
        raise
    return name


def _addresses(pid: int) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    """This side's and the namespace's addresses in the /30 that belongs to process ``pid``."""
    blocks = NETWORK.num_addresses // 4
    base = NETWORK.network_address + 4 * (pid % blocks)
    return base + 1, base + 2


def _remove_leftover_namespaces() -> None:
    """Deletes the namespaces (and with them their veth pairs) of bench processes that no longer run."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    for name in listed:
        pid = name.removeprefix(NAMESPACE_PREFIX)
        if name.startswith(NAMESPACE_PREFIX) and pid.isdigit() and not _running(int(pid)):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(server: subprocess.Popen, endpoint: tuple[str, int], seconds: float = 30) -> None:
    """Returns once ``server`` accepts connections at ``endpoint``; AssistantError if it exits or takes too long."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(endpoint, timeout=1).close()
            return
        except OSError:
            exited = server.poll()
            if exited is not None or time.monotonic() > deadline:
                why = f"it exited with status {exited}" if exited is not None else f"nothing after {seconds:g} s"
                raise AssistantError(f"ggml-rpc-server did not start listening on {endpoint[0]}:{endpoint[1]} ({why})")
            time.sleep(0.1)


def measure(model_set, prompts: list[dict], max_tokens: int, threads: int, delays=DELAYS_MS, splits=SPLITS,
            say=print) -> dict:
    """Per split (servers holding the target's layers) and delay: tokens/s of the chain over the remote target
    and of that target alone, bytes each way per verification round."""
    from assistant.speculative import Pipeline

    with Pipeline.load(model_set.first(1), threads=threads) as local:
        expected = {prompt["id"]: pairs.answer_in_process(local, prompt["messages"], max_tokens).ids
                    for prompt in prompts}
    rows = []
    with RemoteMachine(2 * max(splits), threads, say) as machine:
        for servers in splits:
            endpoints = {"chain": machine.endpoints[:servers], "alone": machine.endpoints[servers : 2 * servers]}
            for delay in delays:
                relays = {way: [Relay(endpoint, delay) for endpoint in endpoints[way]] for way in endpoints}
                try:
                    rows.append(_at_delay(model_set, prompts, max_tokens, threads, delay, relays, expected, say))
                finally:
                    for relay in (relay for group in relays.values() for relay in group):
                        relay.close()
        where = machine.where
    return {"model_set": model_set.name, "max_tokens": max_tokens, "threads": threads, "repeats": pairs.REPEATS,
            "remote": where, "rows": rows, "differing_from_local_target": sum(row["differing"] for row in rows)}


def _counts(relays) -> tuple[int, int]:
    """Bytes out and back over all the servers of one target."""
    counts = [relay.counts() for relay in relays]
    return sum(sent for sent, _ in counts), sum(received for _, received in counts)


def _at_delay(model_set, prompts, max_tokens, threads, delay, relays, expected, say) -> dict:
    from assistant.speculative import Pipeline

    targets = {way: ",".join(relay.endpoint for relay in group) for way, group in relays.items()}
    with Pipeline.load(model_set, threads=threads, target_rpc=targets["chain"]) as chain, \
            Pipeline.load(model_set.first(1), threads=threads, target_rpc=targets["alone"]) as alone:
        pipelines = {"chain": chain, "alone": alone}
        ways = {way: (lambda messages, p=pipeline: pairs.answer_in_process(p, messages, max_tokens))
                for way, pipeline in pipelines.items()}
        before = {way: (_counts(relays[way]), pipelines[way].levels[0].context.decode_calls) for way in ways}
        speeds, differing = {"chain": [], "alone": []}, 0
        for prompt, runs in pairs.alternate(prompts, ways):
            differing += (runs["alone"][0].ids != expected[prompt["id"]]) + (runs["chain"][0].ids != expected[prompt["id"]])
            for way in ways:
                speeds[way].append(pairs.tokens_per_second(runs[way]))
        traffic = {}
        for way, ((sent, received), calls) in before.items():
            now_sent, now_received = _counts(relays[way])
            rounds = pipelines[way].levels[0].context.decode_calls - calls
            traffic[way] = {"rounds": rounds, "sent_per_round": (now_sent - sent) / max(rounds, 1),
                            "received_per_round": (now_received - received) / max(rounds, 1)}
    servers = len(relays["chain"])
    row = {"servers": servers, "delay_ms": delay, "chain_tps": geomean(speeds["chain"]),
           "alone_tps": geomean(speeds["alone"]), "differing": differing, "traffic": traffic, "roles": chain.roles}
    row["chain_over_alone"] = row["chain_tps"] / row["alone_tps"]
    say(f"  {servers} server{'s' if servers > 1 else ''}, +{delay:g} ms round trip: chain {row['chain_tps']:.1f} "
        f"tokens/s, remote target alone {row['alone_tps']:.1f} ({row['chain_over_alone']:.2f}x); per verification "
        f"round {traffic['chain']['sent_per_round'] / 1e3:.1f} kB out, {traffic['chain']['received_per_round']:.0f} B "
        f"back (alone: {traffic['alone']['sent_per_round'] / 1e3:.1f} kB / {traffic['alone']['received_per_round']:.0f} B)"
        f"; {differing} answers differ from the local target")
    return row


def report(result: dict) -> str:
    lines = [f"Remote target ({result['remote']}), model set {result['model_set']!r}, "
             f"{result['max_tokens']} tokens, medians of {result['repeats']}, geomean over prompts:", "",
             "| servers | added round trip | chain tokens/s | remote target alone | chain / alone | kB out per round | "
             "bytes back per round |", "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        chain = row["traffic"]["chain"]
        lines.append(f"| {row.get('servers', 1)} | {row['delay_ms']:g} ms | {row['chain_tps']:.1f} | {row['alone_tps']:.1f} | "
                     f"{row['chain_over_alone']:.2f}x | {chain['sent_per_round'] / 1e3:.1f} | "
                     f"{chain['received_per_round']:.0f} |")
    lines.append(f"\nAnswers (the chain's and the remote target alone's) differing from the local target: "
                 f"{result['differing_from_local_target']}")
    return "\n".join(lines)
