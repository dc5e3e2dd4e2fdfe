"""Issue 12 item 4: degenerate policies earn little in every family, and partial credit never
pays a wrong final answer more than the right one.

The means are over 200 seeds at default knobs, one rollout each; causal diagnosis and code
repair verify every episode with their slow oracle checks, so the fast suite measures them on
fewer seeds and `make test-slow` on all 200.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracegym.synth_envs.base import play
from tracegym.synth_envs.calibration import CalibrationConfig
from tracegym.synth_envs.degenerate import REFUSAL, RandomValidCalls, degenerate_means
from tracegym.synth_envs.families.precondition_verification import REQUESTS
from tracegym.synth_envs.registry import families, make_env
from tracegym.toolcalls import parse_tool_calls, render_tool_call

SEEDS = 200
SLOW = {"causal_diagnosis": 40, "code_repair": 20}  # seeds in the fast suite
BAND_LOW = CalibrationConfig().low
POLICIES = {"refuse", "answer_without_acting", "do_nothing", "random_valid_calls", "repeat_first_tool"}
CASES = (
    [(family, SEEDS) for family in sorted(families()) if family not in SLOW]
    + [(family, seeds) for family, seeds in SLOW.items()]
    + [pytest.param(family, SEEDS, marks=pytest.mark.slow) for family in SLOW]
)


@pytest.mark.parametrize("family, seeds", CASES)
def test_degenerate_policies_earn_less_than_the_band(family: str, seeds: int) -> None:
    means = degenerate_means(family, {}, range(seeds))
    assert set(means) == POLICIES
    too_much = {name: round(mean, 3) for name, mean in means.items() if not (mean <= 0.2 and mean < BAND_LOW)}
    assert not too_much, f"{family}: degenerate policies earn {too_much} (band starts at {BAND_LOW})"


def test_read_then_refuse_r1_earns_little_in_precondition_verification() -> None:
    """The issue's case: reading the records, then "REFUSED: R1", averaged 0.65 over 60 seeds."""
    env = make_env("precondition_verification")
    rewards = [play(env, seed, [env.oracle(seed)[0], REFUSAL])[1].reward for seed in range(SEEDS)]
    assert sum(rewards) / len(rewards) <= 0.2
    wrong_rule = [play(env, seed, [env.oracle(seed)[0], "REFUSED: R9"])[1].reward for seed in range(60)]
    assert max(wrong_rule) == 0.0


def _prefix(env, seed: int, keep: list[bool], noise: int) -> list[str]:
    """Some of the oracle's tool turns, with random valid calls in between, shorter than the turn budget."""
    tools = [turn for turn, kept in zip(env.oracle(seed)[:-1], keep) if kept]
    rng, play_randomly = random.Random(noise), RandomValidCalls()
    texts = [env.reset(seed)]
    for _ in range(rng.randrange(3)):
        call = play_randomly.act(env, seed, noise, len(texts), texts[-1])
        if parse_tool_calls(call).calls and "run_tests" not in call:
            tools.insert(rng.randrange(len(tools) + 1), call)
    return tools[: env.max_turns - 1]


@pytest.mark.parametrize("family", sorted(families()))
def test_a_wrong_final_answer_never_earns_more_than_the_right_one(family: str) -> None:
    env = make_env(family)
    seeds = range(3 if family == "code_repair" else 12)

    @settings(max_examples=15 if family == "code_repair" else 40, deadline=None, derandomize=True)
    @given(
        seed=st.sampled_from(list(seeds)),
        keep=st.lists(st.booleans(), min_size=12, max_size=12),
        noise=st.integers(0, 2**32),
        text=st.text(max_size=40),
    )
    def check(seed: int, keep: list[bool], noise: int, text: str) -> None:
        prefix = _prefix(env, seed, keep, noise)
        right = env.oracle(seed)[-1]
        right_reward = play(env, seed, prefix + [right])[1].reward
        wrong = {text, REFUSAL, "DONE", env.oracle(seeds[-1] + 1 - seed % 2)[-1]}
        wrong |= {trajectory[-1] for trajectory in env.wrong_trajectories(seed)}
        for answer in wrong - {right}:
            if parse_tool_calls(answer).is_final_answer:
                reward = play(env, seed, prefix + [answer])[1].reward
                assert reward <= right_reward, (family, seed, prefix, answer, reward, right_reward)

    check()


def test_write_then_refuse_earns_nothing_in_precondition_verification() -> None:
    """A GRPO run's collapse: the request's write at once, then "REFUSED: R1", earned 0.5 on every
    permitted request and 0.25 on every forbidden one, with no record checked."""
    env = make_env("precondition_verification")
    rewards = []
    for seed in range(SEEDS):
        env.reset(seed)
        world = env.world
        tool = REQUESTS[world.request][0]
        arguments = {"order_id": world.order_id, **({"address": world.address} if tool == "update_address" else {})}
        for answer in (REFUSAL, f"REFUSED: {world.broken or 'R1'}"):
            rewards.append(play(env, seed, [render_tool_call(tool, arguments), answer])[1].reward)
    assert max(rewards) == 0.0


def test_an_unchecked_right_decision_earns_a_quarter_in_precondition_verification() -> None:
    """The request's write at once, then "DONE", earned 0.75 on every permitted request (0.35 over
    200 seeds) with no record checked: only the verdict pays when the decision was a guess."""
    env = make_env("precondition_verification")
    rewards = {}
    for seed in range(SEEDS):
        env.reset(seed)
        world = env.world
        guess = [env.oracle(seed)[-2], "DONE"] if world.broken is None else [f"REFUSED: {world.broken}"]
        rewards[seed] = play(env, seed, guess)[1].reward
        assert play(env, seed, env.oracle(seed))[1].reward == 1.0
    assert set(rewards.values()) == {0.25}
