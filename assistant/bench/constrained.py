"""`bench --constrained`: what a grammar costs the chain. Each of the twenty schema prompts is answered under
its schema by the chain and by the target alone (the answers must be the same tokens), and unconstrained by the
chain for as many tokens as the constrained answer had (free text of the same length, so the comparison is
not one of answer lengths), each ``repeats`` times, alternating the order, greedy."""

from __future__ import annotations

import json
import statistics
import time

from assistant.bench.schemas import SCHEMAS
from assistant.bench.summary import geomean
from assistant.errors import AssistantError

REPEATS = 3


def measure(model_set, prompts, max_tokens: int, threads: int, say=print) -> dict:
    """``prompts`` is not used: the schemas bring their own questions."""
    import jsonschema

    from assistant.serve.schema_grammar import schema_grammar
    from assistant.speculative import Pipeline, Sampling

    chain = Pipeline.load(model_set, threads=threads)
    target = Pipeline.load(model_set, levels=1, threads=threads)
    rows = []
    try:
        for index, (what, schema) in enumerate(SCHEMAS):
            grammar = schema_grammar(schema)
            messages = [{"role": "user", "content": f"Answer in JSON only: {what}."}]
            first = chain.chat(messages, Sampling(), max_tokens, grammar=grammar).finish()
            length = len(first.tokens)
            ways = {"constrained": lambda: chain.chat(messages, Sampling(), max_tokens, grammar=grammar),
                    "free": lambda: chain.chat(messages, Sampling(), length),
                    "target": lambda: target.chat(messages, Sampling(), max_tokens, grammar=grammar)}
            runs = {name: [] for name in ways}
            for repeat in range(REPEATS):
                order = list(ways)[(index + repeat) % 3:] + list(ways)[:(index + repeat) % 3]
                for name in order:
                    began = time.perf_counter()
                    answer = ways[name]().finish()
                    runs[name].append((time.perf_counter() - began, answer))
            for name in ("constrained", "target"):
                if any(answer.tokens != first.tokens for _, answer in runs[name]):
                    raise AssistantError(f"schema {index} ({what}): the {name} answers differ from the first")
            jsonschema.validate(json.loads(first.text), schema)
            speed = {name: len(runs[name][0][1].tokens) / statistics.median(s for s, _ in runs[name]) for name in ways}
            row = {"schema": what, "tokens": length, **{f"{name}_tps": value for name, value in speed.items()}}
            rows.append(row)
            say(f"  {what}: {length} tokens; constrained chain {speed['constrained']:.1f} tokens/s, free chain "
                f"{speed['free']:.1f}, constrained target alone {speed['target']:.1f}")
    finally:
        chain.close()
        target.close()
    return {"model_set": model_set.name, "max_tokens": max_tokens, "threads": threads, "repeats": REPEATS,
            "rows": rows,
            "constrained_over_free": geomean([row["constrained_tps"] / row["free_tps"] for row in rows]),
            "chain_over_target": geomean([row["constrained_tps"] / row["target_tps"] for row in rows])}


def report(result: dict) -> str:
    rows = result["rows"]
    low = min(rows, key=lambda row: row["constrained_tps"] / row["free_tps"])
    return (f"constrained chain / free chain at the same lengths, tokens/s (geomean over {len(rows)} schemas): "
            f"{result['constrained_over_free']:.3f} (lowest {low['constrained_tps'] / low['free_tps']:.3f}, "
            f"{low['schema']}); constrained chain / constrained target alone: {result['chain_over_target']:.3f}; "
            "every answer valid, the chain's equal to the target's")
