"""Prompts on the policy's simulated machine: the target evaluates the prompt before the first round, a
drafter only when a round first plans it (as a catch-up the policy priced), and whole requests are timed,
prompt included. A level the policy leaves out must cost nothing, and one that repays its prompt must run."""

import pytest

from assistant.speculative.chain import PROMPT_SLICE
from assistant.speculative.plan import Batch, RoundRecord
from assistant.speculative.policy import AdaptivePolicy
from tests.test_policy import (FAST_MXFP4, GOOD, NGRAM, SCALAR_MXFP4, SCENARIOS, SMALL, TARGET, Machine,
                               fixed_pipelines)

# Seconds per prompt token in one long batch: a prompt is compute-bound, far cheaper per token than decoding.
PROMPT_RATE = {TARGET: 0.005, FAST_MXFP4: 0.0015, SCALAR_MXFP4: 0.5, SMALL: 0.0004}


class PromptMachine(Machine):
    """``Machine`` with a prompt of ``prompt`` tokens per generation. The target and the policy's ``upfront``
    levels evaluate it before the first round, a level the policy wants a prompt rate for its first slice; any
    other model level catches up on what it lacks (the prompt, then rounds it sat out) when a round plans it,
    recorded as a batch of its own, as chain.py does."""

    def __init__(self, cost, acceptance, prompt: int, seed=0, proposes=None):
        super().__init__(cost, acceptance, seed, proposes)
        self.prompt = prompt
        self.models = [index for index, level_cost in enumerate(cost) if level_cost is not NGRAM]
        self.caught_up = [0] * len(cost)  # tokens each level evaluated catching up, prompts included

    def generate(self, policy, generations=6, tokens=128) -> float:
        """Seconds per new token over whole requests (the prompt included)."""
        began = self.clock
        for _ in range(generations):
            policy.begin_generation()
            self.position = self.prompt
            self.held = {level: 0 for level in self.models}
            timed = RoundRecord()
            for level in self.models:
                if level == 0 or level in policy.upfront:
                    self._evaluate(level, self.prompt, None)
                elif policy.wants_rate(level) and self.prompt > 2 * PROMPT_SLICE:
                    self._evaluate(level, PROMPT_SLICE, timed)
            policy.record(timed)
            made = 0
            while made < tokens:
                behind = [self.position - self.held[level] if level in self.held else 0 for level in range(len(self.cost))]
                plan = policy.plan(behind, tokens - made)
                record = RoundRecord()
                for level in plan.shape[1:]:
                    if behind[level] > 1:
                        self._evaluate(level, behind[level], record)
                made_now = self.verify(plan, 0, tokens - made, record)
                policy.record(record)
                made += made_now
                self.position += made_now
                for level in plan.shape:
                    if level in self.held:
                        self.held[level] = self.position
        return (self.clock - began) / (generations * tokens)

    def _evaluate(self, level: int, count: int, record) -> None:
        seconds = count * PROMPT_RATE[self.cost[level]]
        self.clock += seconds
        self.held[level] += count
        if level:
            self.caught_up[level] += count
        if record is not None:
            record.batches.append(Batch(level, count, seconds))


class Eager(AdaptivePolicy):
    """The adaptive policy as it was: every drafter evaluated the prompt before the first round."""

    @property
    def upfront(self):
        return tuple(range(self.n_levels))


def whole_requests(cost, acceptance, prompt, tokens=128, generations=8):
    """Seconds per new token, prompts included, of the adaptive policy, the eager one and each fixed pipeline
    (whose levels all take part from the first round, so all evaluate the prompt first), after one warm-up
    answer each; and the adaptive machine."""
    def run(policy):
        machine = PromptMachine(cost, acceptance, prompt)
        machine.generate(policy, generations=1, tokens=tokens)
        return machine.generate(policy, generations=generations, tokens=tokens), machine

    adaptive, machine = run(AdaptivePolicy(len(cost)))
    eager, _ = run(Eager(len(cost)))
    fixed = {shape: run(policy)[0] for shape, policy in fixed_pipelines(len(cost)).items()}
    return adaptive, eager, fixed, machine


def test_a_slow_level_left_out_never_evaluates_the_prompt():
    """The MXFP4 level on its scalar path, here without the target's cache to copy (a remote target): it times
    one slice of the first prompt, is found unable to repay the rest, and never evaluates another prompt
    token; whole requests come within 5% of the best fixed pipeline. Evaluated up front as before, its prompt
    alone cost more than the answer."""
    cost = [TARGET, SCALAR_MXFP4, SMALL, NGRAM]
    adaptive, eager, fixed, machine = whole_requests(cost, GOOD, prompt=300)
    assert machine.caught_up[1] == PROMPT_SLICE
    assert adaptive <= min(fixed.values()) / 0.95, (adaptive, fixed)
    assert eager > 2 * min(fixed.values()), (eager, fixed)


@pytest.mark.parametrize("scenario", [name for name, (cost, _) in SCENARIOS.items()
                                      if all(level in PROMPT_RATE or level is NGRAM for level in cost)])
@pytest.mark.parametrize("prompt,tokens", [(100, 32), (1000, 128), (5000, 32), (5000, 512)])
def test_whole_requests_within_five_percent_of_the_best_fixed_pipeline(scenario, prompt, tokens):
    """Short and long prompts, short and long answers: the adaptive policy, paying only the prompts of the
    levels it plans, against fixed pipelines that pay every level's."""
    cost, acceptance = SCENARIOS[scenario]
    adaptive, _, fixed, _ = whole_requests(cost, acceptance, prompt, tokens, generations=6)
    assert adaptive <= min(fixed.values()) / 0.95, (adaptive, fixed)


@pytest.mark.parametrize("prompt,tokens", [(300, 128), (2000, 512)])
def test_drafters_that_repay_their_prompt_still_run(prompt, tokens):
    """Three levels that all pay: whole requests within 5% of the best fixed pipeline, and the small draft
    evaluates every answer's prompt, in the rounds that plan it."""
    cost = [TARGET, FAST_MXFP4, SMALL, NGRAM]
    adaptive, _, fixed, machine = whole_requests(cost, GOOD, prompt, tokens)
    assert adaptive <= min(fixed.values()) / 0.95, (adaptive, fixed)
    assert machine.caught_up[2] >= 8 * prompt, machine.caught_up


def rounds_with(level: int, cost, prompt: int, tokens: int, warm_up: int = 2000) -> tuple[int, float, float, list]:
    """Rounds with ``level`` over eight answers of ``tokens`` after a warm-up answer of ``warm_up``, the
    seconds per token of the adaptive policy and of the target alone, prompts included, and the tokens each
    level caught up on."""
    policy = AdaptivePolicy(len(cost))
    machine = PromptMachine(cost, GOOD, prompt)
    machine.generate(policy, generations=1, tokens=warm_up)
    used = 0
    seconds = 0.0
    for _ in range(8):
        seconds += machine.generate(policy, generations=1, tokens=tokens)
        used += sum(rounds for shape, rounds in policy.explorer.used.items() if level in shape)
    alone = PromptMachine(cost, GOOD, prompt).generate(fixed_pipelines(len(cost))[(0,)], generations=1, tokens=tokens)
    return used, seconds / 8, alone, machine.caught_up


def test_a_drafter_whose_prompt_a_short_answer_cannot_repay_is_left_out(monkeypatch):
    """A 20,000-token prompt costs the small draft 8 s: more than it saves over a 32-token answer (about 1.2 s),
    less than over 2,000 tokens. The policy weighs the catch-up against the rest of the answer either way;
    ranking shapes by their speed alone, it paid the 8 s on short answers."""
    from assistant.speculative.exploration import Explorer

    cost = [TARGET, SMALL, NGRAM]
    short, seconds, alone, _ = rounds_with(1, cost, prompt=20000, tokens=32)
    assert short == 0 and seconds <= alone * 1.01, (short, seconds, alone)
    long, _, _, _ = rounds_with(1, cost, prompt=20000, tokens=2000)
    assert long >= 8 * 100, long
    next_shape = Explorer.next_shape
    monkeypatch.setattr(Explorer, "next_shape", lambda self, predicted, behind, model, remaining=None, usable=None:
                        next_shape(self, predicted, behind, model, None, usable))
    assert rounds_with(1, cost, prompt=20000, tokens=32)[0] > 8


def test_a_level_never_run_waits_for_an_answer_long_enough_to_repay_its_prompt():
    """A fresh pipeline: the small draft times a slice of the 20,000-token prompt before the first round, and
    is not run over 128-token answers (its 8 s could at best save half of their 6.4 s at the target alone);
    the first 2,000-token answer runs it. Without the slice, the first round paid the whole prompt."""
    cost = [TARGET, SMALL, NGRAM]
    short, _, _, caught_up = rounds_with(1, cost, prompt=20000, tokens=128, warm_up=128)
    assert short == 0 and caught_up[1] == PROMPT_SLICE, (short, caught_up)
    long, _, _, caught_up = rounds_with(1, cost, prompt=20000, tokens=2000, warm_up=128)
    assert long >= 8 * 100 and caught_up[1] >= 8 * 20000, (long, caught_up)
