"""Golden record of every family's episodes, to prove a refactor changes no behaviour.

For every family, at its default knobs and at each rung of its ladder, over `seeds(family)`:
the task text, the accepted generator seed, the oracle turns, the observations the oracle
receives, the oracle reward, the rewards of the wrong trajectories, the hint and the gold answer
(texts as length and sha256 prefix, which keeps the file small: the causal family's SQL results
run to 8,000 characters). Plus, at
default knobs, scripted malformed and random (type-correct but arbitrary) action sequences with
the observations and reward they get. The system prompt is left out on purpose (its tool
schemas change by design); `prompts()` lists it for a by-eye diff.

    python -m tests.golden_envs            # rewrite tests/fixtures/golden_envs.json
    python -m tests.golden_envs --prompts  # print every (family, knobs) system prompt as JSON

Recorded at commit 1b8c06d, before the typed-tool refactor; `test_golden_envs.py` replays it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path
from typing import Any

from tracegym.synth_envs.base import play
from tracegym.synth_envs.registry import families, knob_settings, make_env

FIXTURE = Path(__file__).parent / "fixtures" / "golden_envs.json"
SEEDS = {"causal_diagnosis": 12, "code_repair": 8}
DEFAULT_SEEDS = 30
RANDOM_EPISODES = 4


def seeds(family: str) -> range:
    return range(SEEDS.get(family, DEFAULT_SEEDS))


def digest(texts: str | list[str]) -> str:
    """Count (for a list), length and a sha256 prefix of `texts`: equal digests, equal texts."""
    joined = texts if isinstance(texts, str) else "\x1e".join(texts)
    count = "" if isinstance(texts, str) else f"{len(texts)}|"
    return f"{count}{len(joined)}:{hashlib.sha256(joined.encode()).hexdigest()[:16]}"


def _observations(messages: list[Any], last: str) -> str:
    seen = [m.content for m in messages[2:] if m.role == "user"]
    return digest(seen + ([last] if last else []))


def episode_record(family: str, knobs: dict[str, Any], seed: int) -> dict[str, Any]:
    """What the refactor must keep for one episode (everything but the system prompt)."""
    env = make_env(family, **knobs)
    task = env.reset(seed)
    generator_seed = env.generator_seed
    oracle = env.oracle(seed)
    messages, result = play(env, seed, oracle)
    wrong = [play(env, seed, actions)[1].reward for actions in env.wrong_trajectories(seed)]
    return {
        "seed": seed,
        "task": digest(task),
        "generator_seed": generator_seed,
        "oracle": digest(oracle),
        "observations": _observations(messages, result.observation),
        "reward": result.reward,
        "wrong_rewards": wrong,
        "hint": digest(env.hint(seed)),
        "gold": digest(env.gold_answer(seed)),
    }


def replay_record(family: str, seed: int, actions: list[str]) -> dict[str, Any]:
    """Observations and reward of scripted `actions` on `seed` at default knobs."""
    env = make_env(family)
    messages, result = play(env, seed, actions)
    return {
        "seed": seed,
        "actions": actions,
        "observations": _observations(messages, result.observation),
        "reward": result.reward,
    }


def _scripted_actions(family: str) -> list[tuple[int, list[str]]]:
    """Malformed single actions on seed 1, and random play, drawn from the current tool schemas."""
    from tests.test_envs_families import _malformed, _pool, _random_turn

    env = make_env(family)
    env.reset(1)
    scripted = [(1, [action]) for action in _malformed(env)]
    rng = random.Random(11)
    for episode in range(RANDOM_EPISODES):
        seed = episode % len(seeds(family))
        pool = _pool(env, seed)
        actions = []
        for _ in range(env.max_turns + 1):
            action = _random_turn(env, rng, pool)
            actions.append(action.replace('"run_tests"', '"list_files"'))  # no sandbox runs in random play
        scripted.append((seed, actions))
    return scripted


def record() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for family in families():
        out[family] = {
            "settings": [
                {"knobs": knobs, "episodes": [episode_record(family, knobs, s) for s in seeds(family)]}
                for knobs in knob_settings(family)
            ],
            "scripted": [replay_record(family, seed, actions) for seed, actions in _scripted_actions(family)],
        }
    return out


def prompts() -> dict[str, str]:
    return {
        f"{family} {json.dumps(knobs)}": make_env(family, **knobs).system_prompt
        for family in families()
        for knobs in knob_settings(family)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", action="store_true", help="print the system prompts instead")
    args = parser.parse_args()
    if args.prompts:
        print(json.dumps(prompts(), indent=1))
        return
    FIXTURE.write_text(json.dumps(record(), indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
