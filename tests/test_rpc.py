"""The target on another machine: a real ggml-rpc-server (built with our native build) on 127.0.0.1."""

import contextlib
import socket
import struct
import subprocess
import time

import numpy as np
import pytest

from assistant.bench.remote import wait_listening
from assistant.engine import remote
from assistant.errors import AssistantError
from assistant.speculative import Pipeline, Sampling
from tests.fixtures.serve import free_port

PROMPT = "def fibonacci(n):\n    if n < 2:"


def start_rpc_server(port: int, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    """`assistant rpc-server` (it becomes ggml-rpc-server: this pid is the server's), once it accepts."""
    import sys

    server = subprocess.Popen([sys.executable, "-m", "assistant", "rpc-server", "--port", str(port), "--threads", "1"],
                              stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    wait_listening(server, ("127.0.0.1", port))
    return server


@pytest.fixture(scope="module")
def rpc_endpoint():
    port = free_port()
    server = start_rpc_server(port)
    yield f"127.0.0.1:{port}"
    server.kill()
    server.wait()


def answer(pipeline) -> list[int]:
    return pipeline.generate(PROMPT, Sampling(), 48).finish().tokens


def test_a_remote_target_answers_as_the_local_one_and_as_the_chain_with_it(bench_gguf, rpc_endpoint):
    """Lossless across the wire: the chain with a remote target answers as that target alone, which answers as
    the target here (the remote runs ggml's stock CPU kernels on plain buffers; ours run here)."""
    files = [bench_gguf["target_bf16"], bench_gguf["target_mxfp4"], bench_gguf["draft_mxfp4"]]
    with Pipeline.load(files[:1], n_ctx=512) as local:
        local_alone = answer(local)
    with Pipeline.load(files[:1], n_ctx=512, target_rpc=rpc_endpoint) as alone:
        remote_alone = answer(alone)
        assert alone.levels[0].context.endpoint == rpc_endpoint
    with Pipeline.load(files, n_ctx=512, target_rpc=rpc_endpoint) as chain:
        remote_chain = answer(chain)
        assert not any(getattr(level, "shares_target_cache", False) for level in chain.levels)  # no cache over the wire
    assert remote_chain == remote_alone == local_alone and len(remote_alone) == 48


def test_a_frozen_app_runs_its_remote_worker_as_its_own_program_with_the_engine_flag(bench_gguf, rpc_endpoint,
                                                                                      tmp_path, monkeypatch):
    """A bundle has no `python -m`: the engine starts the worker as the bundle's program with its flag, and the
    program's entry point (assistant.cli) must answer that flag by becoming the worker."""
    import sys

    program = tmp_path / "assistant"  # stands in for the bundle's program
    program.write_text(f"#!{sys.executable}\nimport sys\nsys.frozen = True\nfrom assistant.cli import main\n"
                       "raise SystemExit(main())\n")
    program.chmod(0o755)
    with Pipeline.load([bench_gguf["target_bf16"]], n_ctx=512) as local:
        local_alone = answer(local)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(program))
    assert remote.worker_command() == [str(program), remote.WORKER_FLAG]
    with Pipeline.load([bench_gguf["target_bf16"]], n_ctx=512, target_rpc=rpc_endpoint) as alone:
        assert answer(alone) == local_alone


def test_an_unreachable_rpc_server_is_a_clear_error(bench_gguf):
    with pytest.raises(AssistantError, match=r"cannot reach the RPC server at 127\.0\.0\.1:\d+ .*ggml-rpc-server"):
        Pipeline.load([bench_gguf["target_bf16"]], n_ctx=256, target_rpc=f"127.0.0.1:{free_port()}")
    with pytest.raises(AssistantError, match="HOST:PORT"):
        Pipeline.load([bench_gguf["target_bf16"]], n_ctx=256, target_rpc="nowhere")
    from assistant.cli import main

    assert main(["chat", "--target-rpc", "nowhere"]) == 1  # before any screen opens


def test_generate_with_a_remote_target(bench_gguf, rpc_endpoint):
    import json
    import sys

    chain = ["--target", str(bench_gguf["target_bf16"]), "--draft", str(bench_gguf["target_mxfp4"])]
    runs = [subprocess.run([sys.executable, "-m", "assistant", "generate", PROMPT, "--raw", *chain, "-n", "24",
                            "--ctx", "512", "--json", *extra], capture_output=True, text=True, timeout=300)
            for extra in ([], ["--target-rpc", rpc_endpoint])]
    assert all(run.returncode == 0 for run in runs), runs[1].stderr[-2000:]
    here, there = (json.loads(run.stdout) for run in runs)
    assert here["tokens"] == there["tokens"] and len(there["tokens"]) == 24
    unreachable = subprocess.run([sys.executable, "-m", "assistant", "generate", PROMPT, *chain, "--target-rpc",
                                  f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=120)
    assert unreachable.returncode == 1 and unreachable.stderr.startswith("error: cannot reach the RPC server")


def test_serve_with_a_remote_target(server_home, rpc_endpoint):
    from tests.fixtures.serve import ServerProcess
    from tests.test_serve import generate

    process = ServerProcess(server_home, "--target-rpc", rpc_endpoint, "--ctx", "2048", api_key=None).wait_ready()
    try:
        status, reply = process.post("/v1/completions", {"model": "demo", "prompt": PROMPT, "max_tokens": 24})
    finally:
        assert process.stop() == 0
    assert status == 200 and reply["choices"][0]["text"] == generate(server_home, PROMPT, "--raw", "-n", "24")["text"]


def rpc_server(*args, timeout=30):
    import sys

    return subprocess.run([sys.executable, "-m", "assistant", "rpc-server", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_rpc_server_listens_on_loopback_unless_allowed_and_serves_generate(bench_gguf):
    import sys

    refused = rpc_server("--host", "0.0.0.0")
    assert refused.returncode == 1 and "--allow-network" in refused.stderr and "authentication" in refused.stderr
    assert rpc_server("--host", "example.org").stderr.startswith("error: --host 'example.org': ggml-rpc-server needs an IPv4")
    port = free_port()
    server = start_rpc_server(port, stderr=subprocess.PIPE)  # only its first lines are read
    try:
        assert server.stderr.readline().startswith("WARNING: the RPC protocol has no authentication")
        done = subprocess.run([sys.executable, "-m", "assistant", "generate", PROMPT, "--raw", "--target",
                               str(bench_gguf["target_bf16"]), "-n", "8", "--ctx", "256", "--target-rpc",
                               f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and done.stdout.strip(), done.stderr[-1000:]
    finally:
        server.kill()
        server.wait()
        server.stderr.close()


def test_the_handshake_speaks_the_protocol_llama_cpp_was_built_with(rpc_endpoint):
    import re

    from native import build

    source, _ = build.trees(build.cache_root())  # the patched sdist the installed build was made from
    header = (source / "vendor" / "llama.cpp" / "ggml" / "include" / "ggml-rpc.h").read_text()
    versions = dict(re.findall(r"#define RPC_PROTO_(MAJOR|MINOR|PATCH)_VERSION\s+(\d+)", header))
    assert tuple(int(versions[part]) for part in ("MAJOR", "MINOR", "PATCH")) == remote.PROTOCOL
    assert remote.probe(rpc_endpoint) == remote.PROTOCOL


@contextlib.contextmanager
def fake_server(reply: bytes | None):
    """A TCP server that reads the handshake, then sends ``reply`` and closes (None: says nothing, stays open)."""
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    held = []

    def serve():
        connection, _ = listener.accept()
        connection.recv(64)
        if reply is None:
            held.append(connection)
            return
        connection.sendall(reply)
        connection.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield "127.0.0.1:%d" % listener.getsockname()[1]
    finally:
        listener.close()
        for connection in held:
            connection.close()


def test_an_incompatible_silent_or_foreign_server_is_a_clear_error():
    hello_v6 = struct.pack("<QBBBB", 28, 6, 1, 0, 0) + bytes(24)
    with fake_server(hello_v6) as endpoint, pytest.raises(AssistantError, match=r"speaks RPC protocol 6\.1\.0 and "
                                                           r"this build RPC protocol 7\.0\.0: run the same"):
        remote.probe(endpoint)
    hello_v7_0_1 = struct.pack("<QBBBB", 28, 7, 0, 1, 0) + bytes(24)  # ggml would accept it; its ops may differ
    with fake_server(hello_v7_0_1) as endpoint, pytest.raises(AssistantError, match=r"speaks RPC protocol 7\.0\.1"):
        remote.probe(endpoint)
    with fake_server(None) as endpoint, pytest.raises(AssistantError, match="did not answer within 0.5 s: it serves "
                                                       "one client at a time"):
        remote.probe(endpoint, timeout=0.5)
    with fake_server(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n") as endpoint, pytest.raises(AssistantError, match="unknown protocol"):
        remote.probe(endpoint)
    with fake_server(b"") as endpoint, pytest.raises(AssistantError, match="closed the connection during the handshake"):
        remote.probe(endpoint)


def test_a_busy_server_is_a_clear_error(bench_gguf, rpc_endpoint):
    target = [bench_gguf["target_bf16"]]
    with Pipeline.load(target, n_ctx=256, target_rpc=rpc_endpoint):
        with pytest.raises(AssistantError, match="did not answer within 5 s: it serves one client at a time"):
            Pipeline.load(target, n_ctx=256, target_rpc=rpc_endpoint)


def answer_until_killed(pipeline, server, lost: str) -> list[int]:
    """The tokens of an answer during which ``server`` is killed after the fourth; the loss must match ``lost``."""
    said = []
    with pytest.raises(remote.RemoteTargetLost, match=lost):
        for event in pipeline.generate(PROMPT, Sampling(), 48):
            said.append(event.token)
            if len(said) >= 4 and server.poll() is None:
                server.kill()
                server.wait()
    return said


def test_a_server_killed_mid_answer_keeps_the_answer_so_far_and_the_next_answer_reconnects(bench_gguf):
    """Killing ggml-rpc-server mid-answer: the tokens already out stay out, a clear error follows (ggml would abort
    the process: the remote model runs in a worker), and once the server is back the same pipeline answers again."""
    port = free_port()
    server = start_rpc_server(port)
    files = [bench_gguf["target_bf16"], bench_gguf["target_mxfp4"]]
    with Pipeline.load(files, n_ctx=512, target_rpc=f"127.0.0.1:{port}") as pipeline:
        whole = answer(pipeline)
        said = answer_until_killed(pipeline, server, r"the target's RPC server at 127\.0\.0\.1:\d+ dropped the "
                                   r"connection while verifying \(.*\); the answer so far is kept")
        assert 4 <= len(said) < 48 and said == whole[: len(said)]
        with pytest.raises(AssistantError, match="cannot reach the RPC server"):
            answer(pipeline)
        server = start_rpc_server(port)
        try:
            assert answer(pipeline) == whole
        finally:
            server.kill()
            server.wait()


def test_a_link_gone_silent_ends_the_answer_at_the_deadline(bench_gguf, rpc_endpoint, monkeypatch):
    from assistant.bench.relay import Relay

    monkeypatch.setattr(remote, "EVALUATE_SECONDS", 1.0)
    monkeypatch.setattr(remote, "EVALUATE_SECONDS_PER_TOKEN", 0.0)
    host, port = rpc_endpoint.split(":")
    relay = Relay((host, int(port)))
    try:
        with Pipeline.load([bench_gguf["target_bf16"]], n_ctx=256, target_rpc=relay.endpoint) as pipeline:
            said = []
            began = time.monotonic()
            with pytest.raises(remote.RemoteTargetLost, match="did not answer within 1 s while verifying"):
                for event in pipeline.generate(PROMPT, Sampling(), 48):
                    said.append(event.token)
                    if len(said) == 4:
                        relay.freeze()
                        began = time.monotonic()
            assert len(said) >= 4 and time.monotonic() - began < 10
    finally:
        relay.close()  # the server sees the connection end and serves the next client


def test_the_relay_delays_counts_and_can_go_silent():
    """The bench's stand-in for a network: a round trip through it takes the added delay, bytes are counted each
    way, and once frozen nothing more arrives while the connection stays open."""
    import threading

    from assistant.bench.relay import Relay

    echo = socket.create_server(("127.0.0.1", 0))

    def serve():
        connection, _ = echo.accept()
        while data := connection.recv(1 << 16):
            connection.sendall(data * 2)

    threading.Thread(target=serve, daemon=True).start()
    relay = Relay(echo.getsockname()[:2], delay_ms=30)
    host, port = relay.endpoint.split(":")
    try:
        with socket.create_connection((host, int(port))) as client:
            began = time.monotonic()
            client.sendall(b"ping")
            assert _receive_exactly(client, 8) == b"pingping"
            assert 0.03 <= time.monotonic() - began < 0.5
            assert relay.counts() == (4, 8)
            relay.freeze()
            client.sendall(b"more")
            client.settimeout(0.3)
            with pytest.raises(socket.timeout):
                client.recv(8)
    finally:
        relay.close()
        echo.close()


def _receive_exactly(connection, count: int) -> bytes:
    data = b""
    while len(data) < count:
        data += connection.recv(count - len(data))
    return data


def resident_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) / 1024


@contextlib.contextmanager
def rpc_servers(count: int):
    """``count`` ggml-rpc-servers on 127.0.0.1: (processes, endpoints)."""
    servers = []
    try:
        for _ in range(count):
            port = free_port()
            servers.append((start_rpc_server(port), f"127.0.0.1:{port}"))
        yield [server for server, _ in servers], [endpoint for _, endpoint in servers]
    finally:
        for server, _ in servers:
            server.kill()
            server.wait()


def test_a_target_split_over_two_servers_answers_as_the_local_one_each_holding_its_share(bench_gguf):
    """`--target-rpc A,B`: llama.cpp divides the target's layers between the servers (here by their free memory,
    equal on one machine; with `=SHARE`, as told), the drafters stay here, and the answers stay the local ones."""
    files = [bench_gguf["target_bf16"], bench_gguf["target_mxfp4"]]
    size_mb = files[0].stat().st_size / 2**20
    with Pipeline.load(files[:1], n_ctx=512) as local:
        expected = answer(local)
    with rpc_servers(2) as (servers, endpoints):
        idle = [resident_mb(server.pid) for server in servers]
        with Pipeline.load(files, n_ctx=512, target_rpc=",".join(endpoints)) as chain:
            assert answer(chain) == expected
            held = [resident_mb(server.pid) - before for server, before in zip(servers, idle)]
            assert all(0.3 * size_mb < mb < 0.8 * size_mb for mb in held), (held, size_mb)
            assert chain.levels[1].context.model.path == files[1]  # the MXFP4 copy runs here
    with rpc_servers(2) as (servers, endpoints):
        idle = [resident_mb(server.pid) for server in servers]
        with Pipeline.load(files[:1], n_ctx=512, target_rpc=f"{endpoints[0]}=3,{endpoints[1]}=1") as alone:
            assert answer(alone) == expected
            first, second = (resident_mb(server.pid) - before for server, before in zip(servers, idle))
            assert first > 2 * second, (first, second)


def test_endpoints_and_shares_are_checked_before_anything_loads():
    from assistant.engine.devices import split_endpoints

    assert split_endpoints("127.0.0.1:1,10.0.0.2:2") == (["127.0.0.1:1", "10.0.0.2:2"], None)
    assert split_endpoints("a:1=3, b:2=0.5") == (["a:1", "b:2"], [3.0, 0.5])
    for text, message in (("a:1,a:1", "named once"), ("a:1=2,b:2", "every server a share"),
                          ("a:1=0", "positive number"), ("a:1=x", "positive number"), ("a:1,b", "HOST:PORT")):
        with pytest.raises(AssistantError, match=message):
            split_endpoints(text)


def test_each_endpoint_of_a_split_is_probed_and_named(bench_gguf, rpc_endpoint):
    hello_v6 = struct.pack("<QBBBB", 28, 6, 1, 0, 0) + bytes(24)
    with fake_server(hello_v6) as other:
        with pytest.raises(AssistantError, match=rf"the RPC server at {other} speaks RPC protocol 6\.1\.0"):
            Pipeline.load([bench_gguf["target_bf16"]], n_ctx=256, target_rpc=f"{rpc_endpoint},{other}")
    gone = f"127.0.0.1:{free_port()}"
    with pytest.raises(AssistantError, match=rf"cannot reach the RPC server at {gone}"):
        Pipeline.load([bench_gguf["target_bf16"]], n_ctx=256, target_rpc=f"{rpc_endpoint},{gone}")


def test_a_server_of_a_split_killed_mid_answer_is_named_and_the_answer_so_far_kept(bench_gguf):
    files = [bench_gguf["target_bf16"], bench_gguf["target_mxfp4"]]
    with rpc_servers(2) as (servers, endpoints):
        with Pipeline.load(files, n_ctx=512, target_rpc=",".join(endpoints)) as pipeline:
            whole = answer(pipeline)
            said = answer_until_killed(pipeline, servers[1], rf"RPC server at {endpoints[1]} \(of {endpoints[0]}, "
                                       rf"{endpoints[1]}\) dropped the connection while verifying .*the answer so far is kept")
            assert 4 <= len(said) < 48 and said == whole[: len(said)]


@pytest.fixture(scope="module")
def wide_target(tmp_path_factory):
    """A random Qwen2 target with a 152k-token vocabulary (Qwen2's): a row of logits is 608 KB."""
    from converters import convert
    from converters.random_checkpoint import make_checkpoint

    directory = tmp_path_factory.mktemp("wide")
    make_checkpoint(directory / "hf", arch="qwen2", vocab=151936)
    return convert(directory / "hf", outdir=directory, name="wide", types=("bf16",), progress=False)["bf16"]


def answer_and_bytes_back(target, endpoint: str, sampling, chooses: bool, monkeypatch) -> tuple[list[int], float]:
    """A 16-token answer of ``target`` on the server at ``endpoint`` (asking it for row choices or not), and the
    bytes that came back per verification round, through a relay that counts them."""
    from assistant.bench.relay import Relay

    monkeypatch.setattr(remote.RemoteContext, "chooses", chooses)
    host, port = endpoint.split(":")
    relay = Relay((host, int(port)))
    try:
        with Pipeline.load([target], n_ctx=256, target_rpc=relay.endpoint) as pipeline:
            pipeline.generate(PROMPT, Sampling(), 1).finish()  # load and prompt
            _, before = relay.counts()
            calls = pipeline.levels[0].context.decode_calls
            tokens = pipeline.generate(PROMPT + " return", sampling, 16).finish().tokens
            rounds = pipeline.levels[0].context.decode_calls - calls
            return tokens, (relay.counts()[1] - before) / rounds
    finally:
        relay.close()


def test_greedy_verification_brings_back_token_ids_not_logits(wide_target, rpc_endpoint, monkeypatch):
    """Greedy verification asks the server for each row's argmax instead of its logits: the same answer, and at
    least 10x fewer bytes back per round."""
    logits, per_round_logits = answer_and_bytes_back(wide_target, rpc_endpoint, Sampling(), False, monkeypatch)
    ids, per_round_ids = answer_and_bytes_back(wide_target, rpc_endpoint, Sampling(), True, monkeypatch)
    assert ids == logits and len(ids) == 16
    assert per_round_logits > 2 * 151936 * 4  # two rows of logits a round (the target evaluates two rows)
    assert per_round_ids * 10 < per_round_logits, (per_round_ids, per_round_logits)


def test_the_remote_target_computes_with_our_kernels_bit_for_bit_as_here(bench_gguf, monkeypatch):
    """`assistant rpc-server` holds the weights in our buffer type, so a verification batch there runs our
    kernels: its logits are the local run's, bit for bit (with llama.cpp's stock kernels there, they are not)."""
    from assistant.engine import Context, Model
    from assistant.engine.remote import RemoteContext
    from assistant.engine.sequence import TokenSequence
    from assistant.speculative.pipeline import target_context_options

    path = bench_gguf["target_bf16"]
    options = target_context_options()
    with Model(path) as model, Model(path, vocab_only=True) as vocabulary:
        prompt = model.tokenize(PROMPT, add_special=False)
        draft = model.tokenize("\n        return n\n    return fibonacci(n - 1)", add_special=False)[:8]
        sequence = TokenSequence(prompt + draft)
        with Context(model, n_ctx=256, **options) as local:
            here = np.array(local.evaluate(sequence, len(prompt) - 1))
        for kernels, equal in (("auto", True), ("stock", False)):
            monkeypatch.setenv("ASSISTANT_BF16_KERNEL", kernels)
            port = free_port()
            server = start_rpc_server(port)
            try:
                remote_context = RemoteContext(vocabulary, f"127.0.0.1:{port}", n_ctx=256, **options)
                there = np.array(remote_context.evaluate(sequence, len(prompt) - 1))
                remote_context.close()
            finally:
                server.kill()
                server.wait()
            assert there.shape == here.shape and np.array_equal(there, here) == equal, kernels


SAMPLED = Sampling(temperature=0.9, top_k=20, top_p=0.95, seed=11)


def counting_calls(monkeypatch, *names) -> dict:
    """Counts the calls of RemoteContext's methods ``names`` (they still do their work)."""
    calls = dict.fromkeys(names, 0)
    for name in names:
        method = getattr(remote.RemoteContext, name)

        def counted(self, *args, _name=name, _method=method):
            calls[_name] += 1
            return _method(self, *args)

        monkeypatch.setattr(remote.RemoteContext, name, counted)
    return calls


def test_sampling_with_top_k_over_a_remote_target_reads_each_rows_candidates(bench_gguf, rpc_endpoint, monkeypatch):
    """A chain (target and the small draft, a fixed draft length) sampling with top-k and a fixed seed over a
    remote target gives the same tokens as over the local target: the server sends each verified row's top
    candidates, from which the acceptance rule's distributions are exactly the full rows'. With no spare
    candidate every row may miss a tie at the k-th value, so each is fetched again in full: the same tokens."""
    from assistant.speculative import candidates

    files = [bench_gguf["target_bf16"], bench_gguf["draft_bf16"]]
    with Pipeline.load(files, n_ctx=512, draft_length=3) as local:
        expected = local.generate(PROMPT, SAMPLED, 40).finish()
    assert expected.stats.levels[1].accepted and expected.stats.levels[1].accepted < expected.stats.levels[1].proposed
    calls = counting_calls(monkeypatch, "candidates", "evaluate")
    with Pipeline.load(files, n_ctx=512, draft_length=3, target_rpc=rpc_endpoint) as chain:
        assert chain.generate(PROMPT, SAMPLED, 40).finish().tokens == expected.tokens
        assert calls["candidates"] >= 10 and calls["evaluate"] == 0
        monkeypatch.setattr(candidates, "SPARE", 0)
        calls.update(candidates=0, evaluate=0)
        assert chain.generate(PROMPT, SAMPLED, 40).finish().tokens == expected.tokens
        assert calls["evaluate"] == calls["candidates"] >= 10


def test_sampling_with_top_k_brings_back_candidates_not_logits(wide_target, rpc_endpoint, monkeypatch):
    """Sampling with top-k, the server sends each row's top_k + SPARE candidates instead of the row: the same
    tokens as the local target's, at least 10x fewer bytes back per round. Without top-k (the default) every row
    still comes back whole. The local reference evaluates as a remote target does (two rows a step on the plain
    attention graph), so that their logits have the same bits."""
    monkeypatch.setenv("ASSISTANT_TARGET_MIN_BATCH", "2")
    monkeypatch.setenv("ASSISTANT_TARGET_FLASH_ATTENTION", "off")
    with Pipeline.load([wide_target], n_ctx=256) as local:
        expected = local.generate(PROMPT + " return", SAMPLED, 16).finish().tokens
    logits, per_round_logits = answer_and_bytes_back(wide_target, rpc_endpoint, SAMPLED, False, monkeypatch)
    candidates, per_round_candidates = answer_and_bytes_back(wide_target, rpc_endpoint, SAMPLED, True, monkeypatch)
    _, per_round_no_top_k = answer_and_bytes_back(wide_target, rpc_endpoint, Sampling(temperature=0.9, seed=11), True,
                                                  monkeypatch)
    assert candidates == logits == expected and len(expected) == 16
    assert per_round_logits > 2 * 151936 * 4  # two rows of logits a round (the target evaluates two rows)
    assert per_round_no_top_k > 151936 * 4
    assert per_round_candidates * 10 < per_round_logits, (per_round_candidates, per_round_logits)


def test_the_server_reports_each_graphs_time_and_the_bench_reads_the_verification_cost_from_it(bench_gguf, tmp_path,
                                                                                                 monkeypatch):
    """With ASSISTANT_RPC_TIMINGS set, our ggml-rpc-server prints one line per graph it computes (wall time, node
    count), and none without it; `bench --remote-verify` sums them per verification: the cost of 1 and 8 tokens by
    the server's clock, below the client's, with our kernels and stock ones there."""
    import json
    import re
    import sys

    from assistant.engine import Model
    from assistant.engine.remote import RemoteContext
    from assistant.engine.sequence import TokenSequence

    path = bench_gguf["target_bf16"]
    said = {}
    for timed in (True, False):
        if timed:
            monkeypatch.setenv("ASSISTANT_RPC_TIMINGS", "1")
        else:
            monkeypatch.delenv("ASSISTANT_RPC_TIMINGS")
        port = free_port()
        with open(tmp_path / "server.log", "w") as log:
            server = start_rpc_server(port, stderr=log)
        try:
            with Model(path, vocab_only=True) as vocabulary:
                context = RemoteContext(vocabulary, f"127.0.0.1:{port}", n_ctx=256)
                context.evaluate(TokenSequence(list(range(10, 40))), 29)
                context.choose(TokenSequence(list(range(10, 45))), 29)
                context.close()
        finally:
            server.kill()
            server.wait()
        said[timed] = [line for line in (tmp_path / "server.log").read_text().splitlines() if "assistant-rpc-timing" in line]
    assert len(said[True]) >= 2 and not said[False]
    assert all(re.fullmatch(r"assistant-rpc-timing: graph_(re)?compute \d+\.\d{3} ms [1-9]\d* nodes", line)
               for line in said[True]), said[True]
    done = subprocess.run([sys.executable, "-m", "assistant", "bench", "--remote-verify", str(path), "--threads", "1",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| ours |" in done.stdout and "| stock |" in done.stdout
    result = json.loads((tmp_path / "out" / "remote-verify.json").read_text())
    for row in result["kernels"].values():
        for cost in row["costs"].values():
            assert 0 < cost["server_ms"] < cost["client_ms"] and cost["graphs"] >= 1 and cost["nodes"] > 0
        assert row["server_ratio"] > 0
