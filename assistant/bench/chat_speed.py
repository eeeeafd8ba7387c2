"""The chat's speed against `assistant generate`'s on the same question and model set (issue 40).

    python -m assistant.bench.chat_speed [--repeats 3] [--question TEXT] [--temperature T] [--against-target] [--json]

Each repeat runs `assistant generate --json` once and the chat once, alternating: the chat in a real terminal
(a private tmux server, 120x40, as a user runs it), a fresh process each time, its answer read from the
conversation store once complete (the store, not the screen, is polled: the measurement adds no terminal
work), its conversation deleted after. Both use the data directory (ASSISTANT_HOME or the default) and
`generate` is given the chat's settings: model set, levels, temperature, token limit, context. Prints
tokens/s after the prompt for each run and how long the chat took to be ready for input, the ratio of the
medians, how far apart `generate`'s own runs were (the noise a ratio has to be read against: on a shared machine
one run can be 10% off the next) and whether every run gave the same answer.

``--against-target`` compares the chat with its settings against the same chat with speculation off (the target
alone) instead of against `generate`; ``--temperature`` sets the chat's temperature for the runs, as its
settings screen would (the user's settings are restored after). Sampled answers differ from run to run (the
chat draws a fresh seed each time), so use more repeats there.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

QUESTION = "Explain how a hash map works, in detail, with an example in Python."


def after_prompt(stats: dict) -> float:
    """Tokens/s once the prompt is in: what the two ways of asking share."""
    return stats["new_tokens"] / max(stats["seconds"] - stats["prompt_seconds"], 1e-9)


def generate_once(question: str, settings, env: dict) -> tuple[dict, str]:
    """`assistant generate` asked as the chat would ask (its settings; its system prompt when set): (stats, text)."""
    from assistant import modelsets

    levels = settings.level_count(len(modelsets.get(settings.model_set).levels))
    command = [sys.executable, "-m", "assistant", "generate", "--json", "--temp", str(settings.temperature),
               "--max-tokens", str(settings.max_tokens), "--levels", str(levels)]
    command += ["--ctx", str(settings.n_ctx)] if settings.n_ctx else []
    command += ["--model-set", settings.model_set] if settings.model_set else []
    command += ["--system", settings.system_prompt] if settings.system_prompt else []
    done = subprocess.run([*command, question], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"assistant generate failed: {done.stderr.strip()}")
    answer = json.loads(done.stdout)
    return answer["stats"], answer["text"]


def chat_once(question: str, settings, env: dict, timeout: float = 600.0) -> tuple[dict, str]:
    """One fresh chat in tmux: wait until it is ready, ask, wait for the stored answer, quit: (stats, text).
    Of ``env`` only the ASSISTANT_* and PYTHON* variables reach the chat (the tmux server's own environment is
    not the caller's)."""
    from assistant import home
    from assistant.conversation.store import Store

    database = home.database_path()
    before = {row[0] for row in _answers(database)}
    name = f"assistant-bench-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", name]
    environment = " ".join(shlex.quote(f"{key}={value}") for key, value in env.items()
                           if key.startswith(("ASSISTANT_", "PYTHON")))
    python = shlex.quote(sys.executable)
    command = f"exec env -u COLUMNS -u LINES TERM=xterm-256color {environment} {python} -m assistant chat"
    started = time.monotonic()
    subprocess.run([*tmux, "-f", "/dev/null", "new-session", "-d", "-s", name, "-x", "120", "-y", "40", command],
                   check=True)
    try:
        subprocess.run([*tmux, "set-option", "-t", name, "window-size", "manual"], capture_output=True)
        deadline = time.monotonic() + timeout
        while "ready" not in _status_line(tmux, name):
            if time.monotonic() > deadline:
                raise SystemExit("the chat did not get ready")
            time.sleep(0.05)
        ready = time.monotonic() - started
        subprocess.run([*tmux, "send-keys", "-t", name, "-l", question], check=True)
        subprocess.run([*tmux, "send-keys", "-t", name, "Enter"], check=True)
        while True:
            fresh = [row for row in _answers(database) if row[0] not in before and row[1]]
            if fresh:
                _, _, stats, conversation, text = fresh[-1]
                store = Store(database)
                store.delete(conversation)
                store.close()
                return json.loads(stats) | {"ready_seconds": ready}, text
            if time.monotonic() > deadline:
                raise SystemExit("the chat's answer did not complete")
            time.sleep(0.5)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def _status_line(tmux: list[str], name: str) -> str:
    """The line above the key legend at the foot of the screen."""
    lines = subprocess.run([*tmux, "capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout
    return "".join(lines.rstrip().splitlines()[-2:-1])


def _answers(database: Path) -> list[tuple[int, int, str, int, str]]:
    """(id, complete, stats, conversation, text) of every stored assistant message with stats."""
    if not database.exists():
        return []
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as connection:
        return connection.execute("SELECT id, complete, stats, conversation_id, content FROM messages "
                                  "WHERE role = 'assistant' AND stats IS NOT NULL").fetchall()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m assistant.bench.chat_speed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--temperature", type=float, help="the chat's temperature for these runs")
    parser.add_argument("--against-target", action="store_true",
                        help="compare the chat against itself with speculation off, not against generate")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which("tmux") is None:
        raise SystemExit("chat_speed needs tmux")
    from dataclasses import replace

    from assistant import home
    from assistant.conversation import settings as chat_settings

    env = dict(os.environ, ASSISTANT_HOME=str(home.data_dir()))
    users = chat_settings.load()
    settings = users if args.temperature is None else replace(users, temperature=args.temperature)
    if args.against_target:
        base, ways = "chat, target alone", [("chat", chat_once, settings),
                                            ("chat, target alone", chat_once, replace(settings, speculation=False))]
    else:
        base, ways = "generate", [("generate", generate_once, settings), ("chat", chat_once, settings)]
    rates = {way: [] for way, _, _ in ways}
    answers = {way: set() for way, _, _ in ways}
    try:
        for repeat in range(args.repeats):
            for way, once, chosen in ways:
                chat_settings.save(chosen)  # the chat reads its settings at start, as after the settings screen
                stats, text = once(args.question, chosen, env)
                rates[way].append(after_prompt(stats))
                answers[way].add(text)
                ready = (f"; ready for input {stats['ready_seconds']:.2f} s after start" if "ready_seconds" in stats
                         else "")
                print(f"{way:>18} #{repeat + 1}: {stats['new_tokens']} tokens, {rates[way][-1]:.1f} tokens/s after "
                      f"the prompt{ready}", file=sys.stderr, flush=True)
    finally:
        chat_settings.save(users)
    ratio = statistics.median(rates["chat"]) / statistics.median(rates[base])
    spread = max(rates[base]) / min(rates[base]) - 1
    same = answers[base] == answers["chat"] and len(answers["chat"]) == 1
    if args.json:
        print(json.dumps({"rates": rates, "chat_over_" + ("target" if args.against_target else "generate"): ratio,
                          "base_spread": spread, "same_answer": same}))
    else:
        print(f"chat / {base} (medians): {ratio:.2f}x; {base}'s own runs spread {spread:.0%}; "
              + ("every run gave the same answer" if same else "the answers differ between runs or ways"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
