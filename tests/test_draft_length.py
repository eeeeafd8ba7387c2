"""The adaptive draft length against synthetic costs: step-shaped batch costs like our chunked kernels."""

import random
from collections import Counter

import pytest

from assistant.speculative.draft_length import MAX_DRAFT, AdaptiveLength, ConstantLength, _BatchCost, make_policy


def step_cost(chunk: int, seconds: float = 0.02):
    """A kernel computing columns in chunks of ``chunk``: each started chunk costs ``seconds``."""
    return lambda batch: seconds * -(-batch // chunk)


def judge(rng: random.Random, drafted: int, acceptance: float) -> int:
    accepted = 0
    while accepted < drafted and rng.random() < acceptance:
        accepted += 1
    return accepted


def run_two_levels(policy, cost, acceptance, rounds=300, draft_seconds=0.001, seed=0) -> list[int]:
    """Target verifying a drafter as chain.py does; the draft lengths the policy chose, round by round."""
    rng = random.Random(seed)
    chosen = []
    for _ in range(rounds):
        k = policy.plan(0)[1]
        policy.record_draft(1, k, k * draft_seconds)
        policy.record_verify(0, k + 1, cost(k + 1), k, judge(rng, k, acceptance))
        chosen.append(k)
    return chosen


def settled(chosen: list[int]) -> int:
    return Counter(chosen[-100:]).most_common(1)[0][0]


def test_step_cost_settles_just_below_the_step():
    """Flat to batch 8, double after: k = 7 (batch 8), not k = 8 (batch 9) as a linear fit chose."""
    chosen = run_two_levels(AdaptiveLength(2), step_cost(8), acceptance=0.9)
    assert settled(chosen) == 7
    assert chosen[-50:].count(7) >= 45


def test_step_cost_of_sixteen_drafts_long():
    chosen = run_two_levels(AdaptiveLength(2), step_cost(16), acceptance=0.95)
    assert settled(chosen) >= 12


def test_low_acceptance_drafts_short():
    chosen = run_two_levels(AdaptiveLength(2), step_cost(16), acceptance=0.3)
    assert settled(chosen) <= 3


def test_explores_past_the_sizes_seen():
    """A level that only ever verified batches of 1..5 at high acceptance tries a longer draft."""
    policy = AdaptiveLength(2)
    for batch in range(1, 6):
        policy.record_draft(1, batch - 1, 0.001 * (batch - 1))
        policy.record_verify(0, batch, 0.02, batch - 1, batch - 1)
    assert policy.plan(0)[1] == MAX_DRAFT


def test_unmeasured_sizes_are_predicted_optimistically():
    cost = _BatchCost()
    cost.add(5, 0.02)
    assert cost.seconds(2) == cost.seconds(16) == pytest.approx(0.02)
    cost.add(9, 0.04)
    assert cost.seconds(8) == pytest.approx(0.02)  # nearest smaller measured size
    assert cost.seconds(3) == pytest.approx(0.02)  # only larger sizes known: the nearest one
    assert cost.seconds(9) == cost.seconds(16) == pytest.approx(0.04)


def test_batch_cost_forgets():
    """A size that became cheap is re-learnt, through the policy's own records."""
    policy = AdaptiveLength(2)
    run_two_levels(policy, step_cost(8), acceptance=0.9)
    assert policy.plan(0)[1] == 7
    for _ in range(30):
        policy.record_draft(1, MAX_DRAFT, MAX_DRAFT * 0.001)
        policy.record_verify(0, MAX_DRAFT + 1, 0.02, MAX_DRAFT, MAX_DRAFT)
    assert policy.verify_cost[0].seconds(MAX_DRAFT + 1) < 0.022
    assert policy.plan(0)[1] == MAX_DRAFT


def test_acceptance_counts_only_judged_drafts():
    """Drafts after the first rejection were never judged: a = 0.9 must not read as accepted/drafted ~ 0.6."""
    policy = AdaptiveLength(2)
    rng = random.Random(1)
    for _ in range(400):
        policy.record_verify(0, 9, 0.02, 8, judge(rng, 8, 0.9))
    assert policy.acceptance(0) == pytest.approx(0.9, abs=0.04)


def run_three_levels(policy, target_cost, middle_cost, rounds=400, seed=0) -> tuple[list[int], list[int]]:
    """Target <- middle <- last, nested as in chain.py; the lengths chosen for the target and the middle."""
    rng = random.Random(seed)
    target_lengths, middle_lengths = [], []
    for _ in range(rounds):
        k = policy.plan(0)[1]
        target_lengths.append(k)
        elapsed, produced = 0.0, 0
        while produced < k:  # the middle level produces k tokens, one verification of the last level at a time
            room = k - produced
            wanted = min(policy.plan(1)[1], room - 1)
            middle_lengths.append(wanted)
            if wanted > 0:
                policy.record_draft(2, wanted, wanted * 0.0005)
            seconds = middle_cost(wanted + 1)
            accepted = judge(rng, wanted, 0.9)
            policy.record_verify(1, wanted + 1, seconds, wanted, accepted)
            elapsed += wanted * 0.0005 + seconds
            produced += accepted + 1
        policy.record_draft(1, k, elapsed)
        policy.record_verify(0, k + 1, target_cost(k + 1), k, judge(rng, k, 0.8))
    return target_lengths, middle_lengths


def test_middle_level_is_priced_at_its_best_length():
    """The middle level settles below its kernel's step, and the target prices it at that length."""
    policy = AdaptiveLength(3)
    target_lengths, middle_lengths = run_three_levels(policy, step_cost(16, 0.05), step_cost(8, 0.005))
    assert settled(middle_lengths) == 7
    assert policy._best(1)[0] == 7
    measured = policy.draft_seconds[1] / policy.draft_tokens[1]
    assert policy._seconds_per_token(1) <= measured
    assert settled(target_lengths) >= 8


def test_constant_and_factory():
    assert ConstantLength(8).plan(0)[1] == 8
    assert isinstance(make_policy("adaptive", 3), AdaptiveLength)
    assert make_policy("5", 2).plan(1)[1] == 5


@pytest.mark.parametrize("chunk,room", [(8, 7), (16, 15)])
def test_verify_room_extends_to_the_end_of_the_chunk(chunk, room):
    """A middle level may hand up drafts past k while the verifier's batch costs the same."""
    policy = AdaptiveLength(2)
    cost = step_cost(chunk)
    for batch in range(1, 17):
        policy.record_verify(0, batch, cost(batch), batch - 1, batch - 1)
    assert policy.verify_room(0, 3) == room
    assert policy.verify_room(0, 9) == 15  # batches 10..16 cost what 10 does under either kernel
    assert ConstantLength(8).verify_room(0, 8) == 8


def run_skippable(policy, middle_cost, acceptance_middle, acceptance_small, rounds=400, seed=0):
    """Target (a step cost flat to 16) over a middle level (``middle_cost``) over a small draft (1 ms/token):
    which level drafted for the target, round by round. A draft token's fate at the target is decided by
    the small draft's own acceptance when the middle level is skipped."""
    rng = random.Random(seed)
    target_cost = step_cost(16, seconds=0.05)
    chosen = []
    for _ in range(rounds):
        drafter, k = policy.plan(0)
        if drafter == 1:
            made, seconds = 0, 0.0
            while made < k:  # the middle level's rounds over the small draft
                _, k2 = policy.plan(1)
                policy.record_draft(2, k2, k2 * 0.001)
                accepted = judge(rng, k2, acceptance_small)
                policy.record_verify(1, k2 + 1, middle_cost(k2 + 1), k2, accepted, 2)
                made += accepted + 1
                seconds += k2 * 0.001 + middle_cost(k2 + 1)
            policy.record_draft(1, made, seconds)
            policy.record_verify(0, made + 1, target_cost(made + 1), made, judge(rng, made, acceptance_middle), 1)
        else:
            policy.record_draft(2, k, k * 0.001)
            policy.record_verify(0, k + 1, target_cost(k + 1), k, judge(rng, k, acceptance_small), 2)
        chosen.append(drafter)
    return chosen


def test_an_expensive_middle_level_is_skipped_when_the_small_draft_agrees():
    chosen = run_skippable(AdaptiveLength(3), step_cost(8, seconds=0.08), 0.95, 0.9)
    assert chosen[-100:].count(2) >= 90


def test_a_cheap_middle_level_is_kept_when_the_small_draft_is_poor():
    chosen = run_skippable(AdaptiveLength(3), step_cost(8, seconds=0.005), 0.95, 0.4)
    assert chosen[-100:].count(1) >= 90


def test_constant_length_never_skips():
    assert ConstantLength(8).plan(0) == (1, 8)


def test_stop_threshold_follows_the_price_of_a_draft_token():
    """A draft token that is cheap beside the verification it may save is drafted at lower confidence."""
    policy = AdaptiveLength(3)
    policy.record_verify(0, 1, 0.050, 0, 0)  # the target: 50 ms a batch
    policy.record_verify(1, 1, 0.004, 0, 0)  # a middle level hardly dearer than the draft
    policy.record_draft(2, 10, 0.010)  # 1 ms a draft token
    assert policy.stop_threshold(0, 2, 0.3) == pytest.approx(0.05)
    assert policy.stop_threshold(1, 2, 0.3) == 0.3
    assert policy.stop_threshold(0, 2, 0.0) == 0.0
    assert ConstantLength(8).stop_threshold(0, 1, 0.3) == 0.3
