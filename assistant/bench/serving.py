"""What the server costs: the same prompts answered in process (as `assistant generate` does) and streamed
through the server over loopback, alternating, greedy, on one model set.

Both use one Pipeline: the server (the app of `assistant serve`, on uvicorn in a thread) generates with the
very pipeline the direct runs use, so the figures differ only by what serving adds (the HTTP exchange, JSON
and Server-Sent Events framing, the hand-over between the generation thread and the event loop), not by two
pipelines' own histories. The client reads the stream in this process too, so it competes with the server for
the interpreter: if anything the overhead is overstated. Times run from the request to the last token, prompt
included; the answers must be identical."""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time

from assistant.bench import pairs
from assistant.bench.summary import geomean
from assistant.errors import AssistantError


def measure(model_set, prompts: list[dict], max_tokens: int, threads: int, say=print) -> dict:
    from assistant.speculative import Pipeline

    pipeline = Pipeline.load(model_set, threads=threads)
    server, port = _serve(pipeline, model_set.name)
    try:
        ways = {"direct": lambda messages: pairs.answer_in_process(pipeline, messages, max_tokens),
                "served": lambda messages: _stream(port, model_set.name, messages, max_tokens)}
        rows = []
        for prompt, runs in pairs.alternate(prompts, ways):
            served = runs["served"]
            row = {"id": prompt["id"], "tokens": served[0].tokens,
                   "direct_tps": pairs.tokens_per_second(runs["direct"]),
                   "served_tps": pairs.tokens_per_second(served),
                   "served_generation_share": sum(run.stats for run in served) / sum(run.seconds for run in served)}
            rows.append(row)
            say(f"  {prompt['id']}: {row['tokens']} tokens, direct {row['direct_tps']:.1f} tokens/s, served "
                f"{row['served_tps']:.1f} tokens/s (medians of {pairs.REPEATS}); generation "
                f"{row['served_generation_share']:.1%} of the served time")
    finally:
        _stop(server)
    return {"model_set": model_set.name, "max_tokens": max_tokens, "threads": threads, "repeats": pairs.REPEATS,
            "rows": rows, "served_over_direct": geomean([row["served_tps"] / row["direct_tps"] for row in rows])}


def measure_sampled(model_set, prompts: list[dict], max_tokens: int, threads: int, temperature: float, seeds: int,
                    say=print) -> dict:
    """`bench --serving --temperature T`: the default chain against the target alone, each behind its own server,
    streamed requests at ``temperature`` with a seed, as an editor sends them; per prompt, each seed's answers
    alternate (``pairs.REPEATS`` each) and must be the same text (a seed's answer is the target's sample)."""
    from assistant.speculative import Pipeline

    loaded = {"default chain": Pipeline.load(model_set, threads=threads),
              "target alone": Pipeline.load(model_set, levels=1, threads=threads)}
    servers = {}
    try:
        for way, pipeline in loaded.items():
            servers[way] = _serve(pipeline, model_set.name)
        for _, port in servers.values():  # once, not before every prompt and seed
            _stream(port, model_set.name, prompts[0]["messages"], max_tokens, {"temperature": temperature, "seed": 0})
        rows = []
        for prompt in prompts:
            spent = {way: [0.0, 0] for way in loaded}  # seconds (median of the repeats) and tokens, seeds summed
            for seed in range(seeds):
                sampling = {"temperature": temperature, "seed": seed}
                ways = {way: (lambda messages, port=port: _stream(port, model_set.name, messages, max_tokens,
                                                                  sampling))
                        for way, (_, port) in servers.items()}
                for _, runs in pairs.alternate([prompt], ways, warm=False):
                    for way, mine in runs.items():
                        spent[way][0] += statistics.median(run.seconds for run in mine)
                        spent[way][1] += mine[0].tokens
            rate = {way: tokens / seconds for way, (seconds, tokens) in spent.items()}
            rows.append({"id": prompt["id"], "tokens": spent["target alone"][1],
                         "chain_tps": rate["default chain"], "target_tps": rate["target alone"],
                         "chain_over_target": rate["default chain"] / rate["target alone"]})
            say(f"  {prompt['id']}: {rows[-1]['tokens']} tokens over {seeds} seeds, default chain "
                f"{rows[-1]['chain_tps']:.1f} tokens/s, target alone {rows[-1]['target_tps']:.1f}: "
                f"{rows[-1]['chain_over_target']:.2f}x")
    finally:
        for server, _ in servers.values():
            _stop(server)
        for way, pipeline in loaded.items():
            if way not in servers:
                pipeline.close()
    ratios = [row["chain_over_target"] for row in rows]
    return {"model_set": model_set.name, "max_tokens": max_tokens, "threads": threads, "temperature": temperature,
            "seeds": seeds, "repeats": pairs.REPEATS, "rows": rows, "median": statistics.median(ratios),
            "lowest": min(ratios)}


def sampled_report(result: dict) -> str:
    return (f"default chain / target alone through the server at temperature {result['temperature']}, tokens/s over "
            f"whole streamed requests ({len(result['rows'])} prompts x {result['seeds']} seeds x {result['repeats']} "
            f"alternated runs, identical answers): median {result['median']:.3f}x, lowest prompt "
            f"{result['lowest']:.3f}x")


def _serve(pipeline, name: str):
    """The server app over ``pipeline``, listening on a free loopback port, in a thread."""
    import uvicorn

    from assistant.serve.app import create_app
    from assistant.serve.generations import Generations
    from assistant.serve.listener import listen
    from assistant.serve.prompts import prompt_tokens

    generations = Generations(lambda: pipeline, prompt_tokens, max_waiting=1)
    server = uvicorn.Server(uvicorn.Config(create_app(generations, name, pipeline.n_ctx), log_level="warning"))
    listener = listen("127.0.0.1", 0)
    server.generations = generations
    server.thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    generations.start()
    server.thread.start()
    port = listener.getsockname()[1]
    deadline = time.monotonic() + 60
    while not (server.started and generations.state == "ready"):
        if generations.state == "failed" or time.monotonic() > deadline:
            raise AssistantError(f"the server did not start ({generations.error or 'timed out'})")
        time.sleep(0.05)
    return server, port


def _stop(server) -> None:
    server.should_exit = True
    server.thread.join(30)
    server.generations.stop()  # its thread closes the pipeline


def _stream(port: int, model: str, messages: list[dict], max_tokens: int, sampling: dict | None = None) -> pairs.Run:
    """One streamed chat completion read as a client would; its ``stats`` is the server's own generation time.
    ``sampling``: the request's temperature, seed, ... (greedy without)."""
    began = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, **(sampling or {})}
    connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise AssistantError(f"the server answered {response.status}: {response.read()[:200]!r}")
    pieces, tokens, generation = [], None, None
    for line in response:
        if line.strip() == b"data: [DONE]":
            break
        if not line.startswith(b"data: "):
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        if "speculation" in chunk:
            generation = chunk["speculation"]["seconds"]
        for choice in chunk["choices"]:
            pieces.append(choice["delta"].get("content", ""))
    seconds = time.perf_counter() - began
    connection.close()
    return pairs.Run(seconds, "".join(pieces), tokens, stats=generation)
