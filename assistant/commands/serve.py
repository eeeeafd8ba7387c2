"""Serve a model set over an OpenAI-compatible HTTP API, so editors and tools get multi-level speculative
decoding: POST /v1/chat/completions and /v1/completions (streaming or not; `suffix` for fill-in-the-middle
where the model has FIM tokens), GET /v1/models and GET /health.

Point any OpenAI client at http://HOST:PORT/v1 with the model set's name as the model. One answer is
generated at a time; further requests wait in a queue (503 with Retry-After when it is full). Every
response carries `usage` and a `speculation` object: tokens/s and what each level of the chain did.
"""

from __future__ import annotations

import ipaddress
import os
import sys

from assistant.errors import AssistantError

HELP = "serve a model set over an OpenAI-compatible API (for editors and tools)"
KEY_VARIABLE = "ASSISTANT_API_KEY"


def add_arguments(parser) -> None:
    parser.add_argument("-m", "--model-set", metavar="NAME", help="model set to serve (default: the default set; "
                        "the demo set when none is registered); clients send this name as the model")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this "
                        "machine only; any other address, e.g. 0.0.0.0 for the network, needs an API key)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080; 0 picks a free one)")
    parser.add_argument("--api-key", metavar="KEY", help=f"require 'Authorization: Bearer KEY' (default: ${KEY_VARIABLE} if set, "
                        "else no key)")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="let web pages from ORIGIN (e.g. http://localhost:3000) call the server (repeatable); "
                        "requests from any other page are refused")
    parser.add_argument("--ctx", type=int, help="context size in tokens, prompt and answer together "
                          "(default 4096, less where memory is short)")
    parser.add_argument("--levels", type=int, help="use only the first N levels of the set (1 = the target alone)")
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: physical cores)")
    parser.add_argument("--target-rpc", metavar="HOST:PORT[,...]", help="run the target on the machine where "
                        "ggml-rpc-server listens (the drafters stay here; several, comma-separated, share its layers); keep that link on a trusted network")
    parser.add_argument("--temp", type=float, default=0.0, help="temperature for requests that do not give one "
                        "(default 0: greedy, the target's own most likely answer)")
    parser.add_argument("--queue", type=int, default=16, help="requests that may wait while one generates "
                        "(default 16); more are refused with 503 and Retry-After")
    parser.add_argument("--max-body", type=int, default=4, metavar="MIB", help="largest request body in MiB "
                        "(default 4)")


def run(args) -> int:
    import uvicorn

    from assistant import modelsets
    from assistant.demo import model_set_or_demo
    from assistant.serve.app import create_app
    from assistant.serve.generations import Generations
    from assistant.serve.guard import loopback_hosts, origin_option
    from assistant.serve.listener import listen
    from assistant.serve.prompts import prompt_tokens
    from assistant.speculative.pipeline import Pipeline, context_size

    if args.queue < 0 or (args.ctx is not None and args.ctx < 16) or args.max_body < 1:
        raise AssistantError("--queue must be 0 or more, --ctx at least 16 and --max-body at least 1 MiB")
    api_key = args.api_key or os.environ.get(KEY_VARIABLE) or None
    loopback = _loopback(args.host)
    if not api_key and not loopback:
        raise AssistantError(f"--host {args.host} would open the server to the network without an API key: set "
                             f"--api-key KEY or ${KEY_VARIABLE} (clients then send 'Authorization: Bearer KEY')")
    origins = [origin_option(origin) for origin in args.allow_origin]
    listener = listen(args.host, args.port)  # a taken port fails here, before minutes of loading
    try:
        model_set = model_set_or_demo(args.model_set, say=_say)
    except modelsets.ModelSetError as error:
        listener.close()
        raise AssistantError(str(error)) from None
    missing = model_set.missing_files()
    if missing:
        listener.close()
        raise AssistantError(f"model set {model_set.name!r}: missing file {missing[0]}")
    try:
        n_ctx = context_size(model_set, args.levels, args.ctx, args.target_rpc)  # refused before serving
    except AssistantError:
        listener.close()
        raise

    def load():

        pipeline = Pipeline.load(model_set, levels=args.levels, n_ctx=n_ctx, threads=args.threads,
                                 target_rpc=args.target_rpc)
        _say(f"ready: {' ← '.join(pipeline.roles)}; OpenAI base URL {url}/v1, model {model_set.name!r}")
        return pipeline

    def failed(error: str) -> None:
        _say(f"error: {error}")
        server.should_exit = True

    host, port = listener.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    generations = Generations(load, prompt_tokens, args.queue, args.temp, on_failure=failed)
    hosts = loopback_hosts(host, port) if loopback else None  # beyond loopback the key guards it
    app = create_app(generations, model_set.name, n_ctx, api_key, args.max_body << 20, origins, hosts)
    server = _server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5), generations)
    _say(f"serving model set {model_set.name!r} on {url} (loading the models…; Ctrl+C stops)")
    generations.start()
    try:
        server.run(sockets=[listener])
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl+C it handled: the shutdown was clean
        _say("stopped")
    finally:
        generations.stop()
    return 1 if generations.state == "failed" else 0


def _server(config, generations):
    """uvicorn's server, but Ctrl+C first cancels the running answer, so shutdown does not wait for it."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            generations.stop(timeout=0)
            super().handle_exit(sig, frame)

    return Server(config)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
