"""How a draft should propose when the levels sample: the chance that the target keeps a draft's token under each
rule, teacher-forced on the target's own sampled answers (``python -m assistant.bench.proposals``).

- sampled: the draft samples x ~ q, the target keeps it with probability min(1, p(x)/q(x)) (speculative
  sampling): sum_i min(p_i, q_i) per position, the most any rule can keep of one token;
- argmax: the draft proposes its most likely token, the target keeps it with probability p(x);
- coupled (the chain's rule, probabilities.py): both choose with the position's noise, kept where the choices
  agree; estimated over ``draws`` noise rows per position.

Both levels process their logits alike (temperature, top-k, top-p). The text is what the target wrote for each
seed, so the drafts are judged where the target really goes. The coupled rule alone makes a seed's answer the
same whatever the schedule of drafts, which is what lets the adaptive policy run seeded requests.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

RULES = ("sampled", "argmax", "coupled")


def study(pipeline, prompts: list[dict], sampling, seeds: int, max_tokens: int, draws: int) -> dict:
    """Per draft level (role): mean chance per position that the target keeps its token, under each rule."""
    from assistant.engine.chat_template import chat_prompt_tokens
    from assistant.engine.sequence import TokenSequence
    from assistant.speculative.probabilities import Sampler

    chain = pipeline.chain
    n_shared = chain.n_shared
    sampler = Sampler(sampling, n_shared)
    noise = np.random.default_rng(0).standard_exponential((draws, n_shared), dtype=np.float32)
    np.reciprocal(np.maximum(noise, np.finfo(np.float32).tiny), out=noise)
    drafts = [level for level in chain.levels[1:] if level.is_model]
    sums = {level.role: dict.fromkeys(RULES, 0.0) for level in drafts}
    positions = 0
    p, q = np.empty(n_shared, np.float32), np.empty(n_shared, np.float32)
    for prompt in prompts:
        tokens = chat_prompt_tokens(pipeline.target, prompt["messages"])
        for seed in range(seeds):
            answer = pipeline.generate(tokens, replace(sampling, seed=seed), max_tokens).finish().tokens
            if not answer:
                continue
            sequence = TokenSequence(tokens + answer)
            rows = {}
            for level in chain.levels:
                if level.is_model:
                    level.context.reset()
                    rows[level.role] = np.array(level.context.evaluate(sequence, len(tokens) - 1)[: len(answer),
                                                                                                   :n_shared])
                    level.context.reset()
            target = chain.levels[0].role
            for j in range(len(answer)):
                sampler.probabilities(rows[target][j], p)
                target_choices = (noise * p).argmax(axis=1)
                for level in drafts:
                    sampler.probabilities(rows[level.role][j], q)
                    found = sums[level.role]
                    found["sampled"] += float(np.minimum(p, q).sum(dtype=np.float64))
                    found["argmax"] += float(p[q.argmax()])
                    found["coupled"] += float(np.mean((noise * q).argmax(axis=1) == target_choices))
            positions += len(answer)
    return {"positions": positions,
            "levels": {role: {rule: total / max(positions, 1) for rule, total in found.items()}
                       for role, found in sums.items()}}


def main(argv=None) -> int:
    from assistant.bench.sampled import parse_numbers, settings_grid
    from assistant.bench.workloads import DEFAULT_PROMPTS, load_prompts
    from assistant.speculative import Pipeline, Sampling

    parser = argparse.ArgumentParser(prog="python -m assistant.bench.proposals", description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", dest="model_set", help="a registered model set (default: the demo set)")
    parser.add_argument("--temperature", default="0.3,0.7,1.0", help="temperatures (default 0.3,0.7,1.0)")
    parser.add_argument("--top-p", default="1.0", help="top-p values (default 1.0)")
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS)
    parser.add_argument("--limit", type=int, default=4, help="prompts (default 4)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per prompt (default 2)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--draws", type=int, default=64, help="noise rows per position for the coupled rule")
    args = parser.parse_args(argv)
    from assistant import modelsets

    if args.model_set:
        model_set = modelsets.get(args.model_set)
    else:
        from assistant.demo import ensure_demo_set

        model_set = ensure_demo_set(say=lambda text: print(text, file=sys.stderr))
    prompts = load_prompts(args.prompts, args.limit)
    grid = settings_grid(parse_numbers("--temperature", args.temperature, 0.01, 10.0),
                         parse_numbers("--top-p", args.top_p, 0.01, 1.0))
    print("| setting | draft | positions | " + " | ".join(RULES) + " |")
    print("| --- | --- | --- |" + " --- |" * len(RULES))
    with Pipeline.load(model_set, ngram=False) as pipeline:
        for setting in grid:
            sampling = Sampling(setting["temperature"], 0, setting["top_p"])
            found = study(pipeline, prompts, sampling, args.seeds, args.max_tokens, args.draws)
            for role, rules in found["levels"].items():
                print(f"| T={setting['temperature']} top-p={setting['top_p']} | {role} | {found['positions']} | "
                      + " | ".join(f"{rules[rule]:.3f}" for rule in RULES) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
