"""Property tests over many seeds for every environment family.

For each family: the same seed gives the same episode (also in a fresh process with another
hash seed); the oracle earns exactly 1.0; every listed wrong trajectory earns less; random
(type-correct but arbitrary) play earns rewards in [0, 1] and never 1.0; malformed actions come
back as error observations and never raise.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from typing import Any

import pytest

from tracegym.synth_envs import sandbox
from tracegym.synth_envs.base import Environment, play
from tracegym.synth_envs.registry import families, make_env
from tracegym.toolcalls import render_tool_call

SEEDS = {"causal_diagnosis": range(20), "code_repair": range(5)}
DEFAULT_SEEDS = range(100)
FAMILIES = sorted(families())


def seeds_for(family: str) -> range:
    return SEEDS.get(family, DEFAULT_SEEDS)


def test_all_seven_families_are_registered() -> None:
    assert set(FAMILIES) == {
        "structured_data_reasoning",
        "multi_step_task_completion",
        "precondition_verification",
        "tool_calling_precision",
        "error_recovery",
        "causal_diagnosis",
        "code_repair",
    }
    for name in FAMILIES:
        cls = families()[name]
        assert cls.__module__.endswith(name) and cls.description and cls.ladder, name
        docstring = sys.modules[cls.__module__].__doc__ or ""
        assert len(docstring) > 200 and "reward" in docstring.lower(), (
            f"{name}: docstring must state capability and reward"
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_oracle_earns_one_and_wrong_answers_less(family: str) -> None:
    env = make_env(family)
    for seed in seeds_for(family):
        _, result = play(env, seed, env.oracle(seed))
        assert result.terminated and not result.truncated and result.reward == 1.0, (family, seed, result)
        wrong = env.wrong_trajectories(seed)
        assert wrong, (family, seed)
        for actions in wrong:
            _, bad = play(env, seed, actions)
            assert 0.0 <= bad.reward < 1.0, (family, seed, actions, bad)
        assert env.hint(seed) and env.gold_answer(seed) == env.oracle(seed)[-1]


@pytest.mark.parametrize("family", FAMILIES)
def test_same_seed_same_episode(family: str) -> None:
    first, second = make_env(family), make_env(family)
    for seed in list(seeds_for(family))[:5]:
        assert first.reset(seed) == second.reset(seed)
        assert first.oracle(seed) == second.oracle(seed)
        assert first.system_prompt == second.system_prompt
    env = make_env(family)
    texts = {env.reset(seed) + env.gold_answer(seed) + "".join(env.oracle(seed)) for seed in seeds_for(family)}
    # causal episodes differ in their tables; their task and oracle texts repeat for the same cause
    assert len(texts) >= 0.8 * len(seeds_for(family)), "different seeds should give different episodes"


def _digest() -> str:
    parts = []
    for family in FAMILIES:
        if family == "code_repair" and sandbox.unavailable() is not None:
            continue  # its episodes are verified by running code, which refuses without the sandbox
        env = make_env(family)
        for seed in (0, 1):
            parts.append(env.reset(seed) + "\n".join(env.oracle(seed)))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def test_episodes_do_not_depend_on_the_process() -> None:
    code = "from tests.test_envs_families import _digest; print(_digest())"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        check=True,
    )
    assert out.stdout.strip() == _digest()


def _random_value(spec: dict[str, Any], rng: random.Random, pool: list[Any]) -> Any:
    kind = spec.get("type", "string")
    if "enum" in spec:
        return rng.choice(spec["enum"])
    if kind == "integer":
        return rng.choice([0, -1, 1, 7, 10**9])
    if kind == "number":
        return rng.choice([0.0, -3.5, 12.25, 1e12])
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [rng.choice([v for v in pool if isinstance(v, str)] or ["x"]) for _ in range(rng.randrange(0, 3))]
    if kind == "object":
        return {}
    strings = [v for v in pool if isinstance(v, str)] + ["", "x", "' OR 1=1 --", "SELECT 1", "\u00e9\u4e2d", "a" * 500]
    return rng.choice(strings)


def _pool(env: Environment, seed: int) -> list[Any]:
    """Argument values seen in the oracle's calls (real ids), to make random calls hit real records."""
    values: list[Any] = []
    for turn in env.oracle(seed):
        from tracegym.toolcalls import parse_tool_calls

        for call in parse_tool_calls(turn).calls:
            for value in call.arguments.values():
                values.extend(value if isinstance(value, list) else [value])
    return values


def _random_turn(env: Environment, rng: random.Random, pool: list[Any]) -> str:
    choice = rng.random()
    if choice < 0.15:
        return rng.choice(["Done.", "", json.dumps({"cause": "NO_SIGNAL", "slice": {}}), "REFUSED: R1", "42"])
    tool = rng.choice(env.tools)
    properties = tool.get("parameters", {}).get("properties", {})
    arguments = {
        name: _random_value(spec, rng, pool)
        for name, spec in properties.items()
        if name in tool["parameters"].get("required", []) or rng.random() < 0.5
    }
    return render_tool_call(tool["name"], arguments)


@pytest.mark.parametrize("family", FAMILIES)
def test_random_play_rewards_stay_in_unit_interval(family: str) -> None:
    env = make_env(family)
    rng = random.Random(7)
    episodes = 3 if family == "code_repair" else 30
    rewards = []
    for episode in range(episodes):
        seed = episode % len(seeds_for(family))
        pool = _pool(env, seed)
        env.reset(seed)
        for _ in range(env.max_turns + 1):
            action = _random_turn(env, rng, pool)
            if family == "code_repair" and "run_tests" in action:
                action = render_tool_call("list_files", {})
            result = env.step(action)
            if result.ended:
                break
        assert result.ended and 0.0 <= result.reward <= 1.0, (family, result)
        rewards.append(result.reward)
    assert max(rewards) < 1.0, f"{family}: random play solved an episode"


def _malformed(env: Environment) -> list[str]:
    tool = env.tools[0]
    properties = tool.get("parameters", {}).get("properties", {})
    wrong_types = {name: (5 if spec.get("type") != "integer" else "five") for name, spec in properties.items()}
    actions = [
        "<tool_call>{not json at all</tool_call>",
        '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',
        '<tool_call>{"name": 5, "arguments": {}}</tool_call>',
        '<tool_call>["a list"]</tool_call>',
        '<tool_call>{"name": "x", "arguments": [1, 2]}</tool_call>',
        render_tool_call(tool["name"], {**wrong_types, "unexpected_argument": 1}),
    ]
    for candidate in env.tools:
        props = candidate.get("parameters", {}).get("properties", {})
        if candidate.get("parameters", {}).get("required"):
            actions.append(render_tool_call(candidate["name"], {}))
        if props:
            actions.append(
                render_tool_call(
                    candidate["name"], {n: (3.5 if s.get("type") != "number" else "3.5") for n, s in props.items()}
                )
            )
            actions.append(
                render_tool_call(
                    candidate["name"], {n: (True if s.get("type") != "boolean" else 1) for n, s in props.items()}
                )
            )
    return actions


@pytest.mark.parametrize("family", FAMILIES)
def test_malformed_actions_become_error_observations(family: str) -> None:
    env = make_env(family)
    for action in _malformed(env):
        env.reset(1)
        result = env.step(action)
        assert not result.ended, action
        assert "error" in result.observation, (action, result.observation)
        assert result.info["errors"] >= 1
    env.reset(2)
    for _ in range(env.max_turns):
        result = env.step("<tool_call>{broken</tool_call>")
    assert result.truncated and not result.terminated and 0.0 <= result.reward < 1.0


def test_step_before_reset_is_a_programming_error() -> None:
    with pytest.raises(RuntimeError):
        make_env("error_recovery").step("hello")


def test_knobs_change_the_episode_size() -> None:
    small = make_env("multi_step_task_completion", n_operations=2)
    large = make_env("multi_step_task_completion", n_operations=6)
    assert small.knobs()["n_operations"] == 2
    assert sum(len(small.oracle(s)) for s in range(10)) < sum(len(large.oracle(s)) for s in range(10))


def test_causal_rewards_follow_the_paper_formula() -> None:
    env = make_env("causal_diagnosis")
    seed = next(seed for seed in range(20) if env.reset(seed) and len(env.world.slice) == 2)
    world = env.world
    (d1, v1), (d2, v2) = world.slice
    half = json.dumps({"cause": world.cause, "slice": {d1: v1}})
    _, result = play(env, seed, [half])
    # r_attr = 0.5 + 0.5 * 1/2, r_full = 0, r_fmt = 1
    assert result.reward == pytest.approx(0.65 * 0.75 + 0.05)
    _, result = play(env, seed, ["not json"])
    assert result.reward == 0.0


def test_causal_sql_is_read_only_and_output_is_capped() -> None:
    env = make_env("causal_diagnosis")
    env.reset(0)
    for query in (
        "DROP TABLE budget_log",
        "CREATE TABLE x AS SELECT 1",
        "SELECT 1; SELECT 2",
        "SELECT * FROM read_csv('/etc/passwd')",
        "COPY budget_log TO '/tmp/leak.csv'",
    ):
        observation = env.step(render_tool_call("sql", {"query": query})).observation
        assert "error" in observation, query
    big = env.step(render_tool_call("sql", {"query": "SELECT * FROM segment_daily"})).observation
    assert "output cut at 8000 characters" in big and len(big) < 8_200
    still = env.step(render_tool_call("sql", {"query": "SELECT count(*) AS n FROM budget_log"})).observation
    assert still == "<tool_response>\nn\n14\n</tool_response>"
    assert not os.path.exists("/tmp/leak.csv")


def test_causal_episodes_see_only_their_own_tables() -> None:
    first, second = make_env("causal_diagnosis"), make_env("causal_diagnosis")
    first.reset(0)
    second.reset(1)

    def total(env, alias: str) -> str:
        query = f"SELECT sum(impressions) AS {alias} FROM daily_campaign"
        return env.step(render_tool_call("sql", {"query": query})).observation.split("\n")[2]

    before, other = total(first, "a"), total(second, "b")
    after = total(first, "c")  # a different text, so not the memoised result of the first query
    assert before == after and before != other
