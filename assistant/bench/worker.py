"""A process that loads each GGUF once and runs pipelines on request: ``python -m assistant.bench.worker``.

Why a process: the kernel switch (ASSISTANT_MXFP4_KERNEL) is read once when llama.cpp starts, so the
stock-kernel pipelines need their own process. All pipelines of one worker share the loaded models (each
has its own contexts), which keeps a 1.7 GB target in memory once. Requests and replies are JSON lines on
stdin and on a private copy of stdout; fd 1 itself is pointed at stderr so library prints cannot corrupt
the protocol.
"""

from __future__ import annotations

import json
import os
import sys
import time


def prompt_text(target, messages: list[dict]) -> str:
    """The chat-templated prompt; for a GGUF that stores no chat template (Gemma 3 270M's Q4_K_M file), the
    messages' text as a plain prompt, which llama.cpp's programs are then given too."""
    from assistant.engine.chat_template import apply_chat_template

    if target.chat_template is None:
        return "\n\n".join(message["content"] for message in messages) + "\n"
    return apply_chat_template(target, messages)


def prompt_tokens(pipeline, messages: list[dict]) -> list[int]:
    """``prompt_text``'s prompt as our pipelines evaluate it."""
    from assistant.engine.chat_template import chat_prompt_tokens

    if pipeline.target.chat_template is None:
        return pipeline.prompt_tokens(prompt_text(pipeline.target, messages))
    return chat_prompt_tokens(pipeline.target, messages)


class Worker:
    def __init__(self):
        self.models: dict[str, object] = {}
        self.pipelines: dict[str, object] = {}

    def load(self, pipelines: dict, n_ctx: int, threads: int) -> dict:
        from assistant.engine import Model
        from assistant.speculative.levels import NgramLevel
        from assistant.speculative.pipeline import DEFAULT_CONFIDENCE, Pipeline, model_levels
        from assistant.speculative.vocab import shared_vocab_size

        began = time.perf_counter()
        for key, spec in pipelines.items():
            models = []
            for path in spec["paths"]:
                if path not in self.models:
                    self.models[path] = Model(path)
                models.append(self.models[path])
            levels = model_levels(list(zip(spec["roles"], models)), n_ctx, threads)
            if spec.get("ngram"):
                levels.append(NgramLevel(capacity=n_ctx))
            confidence = DEFAULT_CONFIDENCE if spec.get("confidence") is None else spec["confidence"]
            self.pipelines[key] = Pipeline(levels, n_ctx, spec["draft_length"], confidence, shared_vocab_size(models))
        return {"seconds": time.perf_counter() - began}

    def prompt_text(self, pipeline: str, messages: list[dict]) -> dict:
        """The chat-templated prompt exactly as our pipelines see it, for llama.cpp's programs, and its length in
        tokens (llama-bench times a prompt of that length)."""
        chosen = self.pipelines[pipeline]
        return {"text": prompt_text(chosen.target, messages), "tokens": len(prompt_tokens(chosen, messages)),
                "templated": chosen.target.chat_template is not None}

    def verify_costs(self, pipeline: str, messages: list[dict], sizes: list[int], reps: int, level: int = 0) -> dict:
        """Median seconds for the pipeline's target (or model ``level``) to evaluate n new tokens after the
        prompt, per n in ``sizes``: what verifying a draft of n - 1 tokens costs (the tokens' values do not
        change it)."""
        import statistics

        from assistant.engine.sequence import TokenSequence

        context = self.pipelines[pipeline].chain.levels[level].context
        prompt = prompt_tokens(self.pipelines[pipeline], messages)
        context.reset()
        context.evaluate(TokenSequence(prompt), len(prompt) - 1)
        fillers = sorted(set(prompt))[:2]  # two tokens of the vocabulary: alternated, each batch is new to the cache
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for rep in range(reps):
            for index, n in enumerate(sizes):
                batch = TokenSequence(prompt + [fillers[(rep + index) % 2]] * n)
                began = time.perf_counter()
                context.evaluate(batch, len(prompt))
                times[n].append(time.perf_counter() - began)
        context.reset()
        return {"seconds": {str(n): statistics.median(values) for n, values in times.items()}}

    def agreement(self, pipeline: str, messages: list[dict], answer: list[int], longest: int) -> dict:
        """Per level below the target, runs[p]: how many tokens from the answer's position p on that level
        would propose exactly, up to ``longest`` (a model: its greedy choices after the prompt and the answer
        so far, all evaluated in one batch; the n-gram level: its proposal there). The oracle's input."""
        from assistant.bench.oracle import agreement_runs
        from assistant.engine.sequence import TokenSequence

        chain = self.pipelines[pipeline].chain
        prompt = prompt_tokens(self.pipelines[pipeline], messages)
        sequence = prompt + list(answer)
        runs = []
        for level in chain.levels[1:]:
            if level.is_model:
                level.context.reset()
                rows = level.context.evaluate(TokenSequence(sequence), len(prompt) - 1)
                choices = rows[: len(answer), : chain.n_shared].argmax(axis=1).tolist()
                level.context.reset()
                runs.append([min(run, longest) for run in agreement_runs([c == t for c, t in zip(choices, answer)])])
            else:
                runs.append([_matching(level.propose(TokenSequence(sequence[: len(prompt) + p]), longest), answer[p:])
                             for p in range(len(answer))])
        return {"roles": [level.role for level in chain.levels], "runs": runs}

    def run(self, pipeline: str, messages: list[dict], max_tokens: int, sampling: dict | None = None) -> dict:
        """One answer from empty caches, timed whole; greedy unless ``sampling`` gives Sampling's fields."""
        from assistant.speculative import Sampling

        chain = self.pipelines[pipeline]
        # Empty caches first, as llama.cpp's program starts: otherwise the prompt the warm-up ran would be
        # answered without evaluating it, and each prompt would reuse the chat template's opening of the last.
        for level in chain.levels:
            if level.is_model:
                level.context.reset()
        began = time.perf_counter()
        answer = chain.generate(prompt_tokens(chain, messages), sampling=Sampling(**(sampling or {})),
                                max_tokens=max_tokens).finish()
        seconds = time.perf_counter() - began
        stats = answer.stats
        return {
            "tokens": answer.tokens,
            "text": answer.text,
            "token_levels": answer.levels,
            "seconds": seconds,
            "prompt_seconds": stats.prompt_seconds,
            "new_tokens": stats.new_tokens,
            "prompt_tokens": stats.prompt_tokens,
            "stop_reason": stats.stop_reason,
            "levels": [vars(level) | {} for level in stats.levels],
            "shapes": stats.shapes,
        }


def _matching(proposal: list[int], answer: list[int]) -> int:
    """How many leading tokens of ``proposal`` the answer has."""
    count = 0
    while count < len(proposal) and count < len(answer) and proposal[count] == answer[count]:
        count += 1
    return count


def _die_with_parent() -> None:
    """A killed runner must not leave a worker holding gigabytes and a core (Linux; elsewhere a no-op)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main() -> int:
    _die_with_parent()
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    worker = Worker()
    for line in sys.stdin:
        request = json.loads(line)
        operation = request.pop("op")
        try:
            reply = getattr(worker, operation)(**request)
        except Exception as error:  # reported to the runner, which stops with a clear message
            reply = {"error": f"{type(error).__name__}: {error}"}
        replies.write(json.dumps(reply) + "\n")
    replies.flush()
    os._exit(0)  # models are shared between pipelines: let the OS free them rather than closing twice


if __name__ == "__main__":
    sys.exit(main())
