"""Calibrate an environment family's difficulty to a policy.

For a policy (a generation backend plus sampling settings, or any `Policy`), measure the mean
reward over seeds × rollouts at a knob setting and move along the family's difficulty ladder
(`Environment.ladder`, easy -> hard) by bisection until the mean lands in the target band
(default 0.2-0.6). Every measured point is kept as the calibration curve (knobs -> mean reward,
success rate, share of all-0 and all-1 groups). The method (docs/method.md, "Environments and
calibration") uses 100 seeds × 16 rollouts at T = 0.7; the defaults here (`CalibrationConfig`) are
smaller so CPU runs finish, and the policy is measured at the temperature it is trained at
(`RolloutConfig.temperature`).

`measure` is any callable (family, knobs, seeds, rollouts) -> rewards grouped per seed, so the
search runs the same against a real backend (`backend_measure`, through tracegym.rollout) and a
scripted policy (`policy_measure`).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from tracegym.config import RolloutConfig, option
from tracegym.environment import StepResult
from tracegym.synth_envs.base import Environment
from tracegym.synth_envs.registry import get_family, make_env

logger = logging.getLogger(__name__)

Measure = Callable[[str, dict[str, Any], Sequence[int], int], list[list[float]]]


@dataclass(frozen=True)
class CalibrationConfig:
    """Fit an environment's difficulty knobs to the policy before training."""

    flag_prefix: ClassVar[str] = "calibration"
    enabled: bool = option(False, "search the family's knobs against the (warm-started) policy")
    seeds: int = option(8, "seeds per knob setting (the paper uses 100)")
    rollouts: int = option(4, "rollouts per seed (the paper uses 16)")
    low: float = option(0.2, "lower end of the target band of mean reward")
    high: float = option(0.6, "upper end of the target band of mean reward")
    max_all_zero: float = option(0.2, "largest share of groups rewarded 0 throughout, for full acceptance")
    max_all_one: float = option(0.2, "largest share of groups rewarded 1 throughout, for full acceptance")


@dataclass
class Point:
    """Statistics of one knob setting: rewards over seeds × rollouts."""

    knobs: dict[str, Any]
    ladder_index: int
    mean_reward: float
    success_rate: float
    all_zero_groups: float
    all_one_groups: float
    seeds: int
    rollouts: int

    @classmethod
    def from_groups(cls, knobs: dict[str, Any], index: int, groups: list[list[float]]) -> Point:
        rewards = [r for group in groups for r in group]
        if not rewards:
            raise ValueError("no rewards measured")
        return cls(
            knobs,
            index,
            round(sum(rewards) / len(rewards), 4),
            round(sum(r >= 1.0 for r in rewards) / len(rewards), 4),
            round(sum(all(r == 0.0 for r in g) for g in groups) / len(groups), 4),
            round(sum(all(r >= 1.0 for r in g) for g in groups) / len(groups), 4),
            len(groups),
            len(groups[0]),
        )

    def in_band(self, config: CalibrationConfig) -> bool:
        return config.low <= self.mean_reward <= config.high

    def trainable(self, config: CalibrationConfig) -> bool:
        """Mean in band and at least one success: a mean in band from partial credit alone never
        shows GRPO a solved episode."""
        return self.in_band(config) and self.success_rate > 0

    def accepted(self, config: CalibrationConfig) -> bool:
        """The paper's full acceptance: mean and success in band, few degenerate groups."""
        return (
            self.in_band(config)
            and config.low <= self.success_rate <= config.high
            and self.all_zero_groups <= config.max_all_zero
            and self.all_one_groups <= config.max_all_one
        )


@dataclass
class Calibration:
    """The search result for one family: chosen knobs and the measured curve."""

    family: str
    config: CalibrationConfig
    knobs: dict[str, Any]
    in_band: bool
    accepted: bool
    curve: list[Point] = field(default_factory=list)
    policy: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "policy": self.policy,
            "config": asdict(self.config),
            "knobs": self.knobs,
            "in_band": self.in_band,
            "accepted": self.accepted,
            "curve": [asdict(p) for p in sorted(self.curve, key=lambda p: p.ladder_index)],
        }


def calibrate(family: str, measure: Measure, config: CalibrationConfig, policy: str = "") -> Calibration:
    """Bisect the family's ladder (easy -> hard) until a rung is `Point.trainable` (mean reward
    inside the band and some episode solved), measuring `config.seeds` seeds × `config.rollouts`
    rollouts per rung.

    Too easy (mean above the band) moves harder; too hard (mean below the band, or no success)
    moves easier. If no rung is trainable, the choice goes to a rung both solved and failed at
    times (GRPO's groups can vary), then to one in band, then to the mean closest to the band;
    `in_band` says whether the chosen mean is in the band.
    """
    ladder = get_family(family).ladder
    if not ladder:
        raise ValueError(f"family '{family}' declares no difficulty ladder")
    low, high, curve = 0, len(ladder) - 1, []
    while low <= high:
        middle = (low + high) // 2
        groups = measure(family, dict(ladder[middle]), range(config.seeds), config.rollouts)
        point = Point.from_groups(dict(ladder[middle]), middle, groups)
        curve.append(point)
        logger.info(
            "%s rung %d %s: mean reward %.3f, success %.2f",
            family,
            middle,
            point.knobs,
            point.mean_reward,
            point.success_rate,
        )
        if point.trainable(config):
            break
        if point.mean_reward > config.high:
            low = middle + 1
        else:
            high = middle - 1
    centre = (config.low + config.high) / 2
    # ties (e.g. a policy that solves every rung) go to the hardest rung when too easy, the easiest when too hard
    best = min(
        curve,
        key=lambda p: (
            not p.trainable(config),
            not 0 < p.success_rate < 1,
            not p.in_band(config),
            round(abs(p.mean_reward - centre), 6),
            -p.ladder_index if p.mean_reward > config.high else p.ladder_index,
        ),
    )
    return Calibration(family, config, best.knobs, best.in_band(config), best.accepted(config), curve, policy)


def write_calibrations(calibrations: Sequence[Calibration], path: str | Path) -> None:
    """calibration.json: one entry per family with its curve."""
    Path(path).write_text(json.dumps({"families": [c.as_dict() for c in calibrations]}, indent=2))


class Policy(Protocol):
    """Anything that picks the next assistant turn from the episode so far."""

    def act(self, env: Environment, seed: int, rollout: int, turn: int, observation: str) -> str: ...


def policy_measure(policy: Policy) -> Measure:
    """A `Measure` that plays `policy` in-process (no model): for scripted and rule-based policies."""

    def measure(family: str, knobs: dict[str, Any], seeds: Sequence[int], rollouts: int) -> list[list[float]]:
        env = make_env(family, **knobs)
        groups = []
        for seed in seeds:
            group = []
            for rollout in range(rollouts):
                observation = env.reset(seed)
                result = StepResult(observation, 0.0, False, False)
                for turn in range(env.max_turns + 1):
                    result = env.step(policy.act(env, seed, rollout, turn, result.observation))
                    if result.ended:
                        break
                group.append(result.reward)
            groups.append(group)
        return groups

    return measure


def backend_measure(backend: Any, rollout: RolloutConfig, progress: bool = True) -> Measure:
    """A `Measure` that rolls out a generation backend (unhinted) with `tracegym.rollout.run_episodes`."""
    from tracegym.generation import SamplingConfig
    from tracegym.rollout import run_episodes

    params = SamplingConfig(max_new_tokens=rollout.max_new_tokens, temperature=rollout.temperature)

    def measure(family: str, knobs: dict[str, Any], seeds: Sequence[int], rollouts: int) -> list[list[float]]:
        episodes = run_episodes(
            backend, lambda: make_env(family, **knobs), list(seeds), rollouts, params, progress=progress
        )
        return [[e.reward for e in episodes[i * rollouts : (i + 1) * rollouts]] for i in range(len(seeds))]

    return measure


@dataclass
class StepwiseOraclePolicy:
    """Plays the oracle's turns, but at each turn slips with probability 1 - `accuracy`.

    A slip ends the episode with the first wrong trajectory's final answer. Longer oracle
    solutions (harder knobs) therefore succeed less often: success ≈ accuracy ** turns. Random
    draws depend only on (`seed`, episode seed, rollout, turn), so measurements are reproducible.
    """

    accuracy: float
    seed: int = 0

    def act(self, env: Environment, seed: int, rollout: int, turn: int, observation: str) -> str:
        oracle = env.oracle(seed)
        rng = random.Random(hash((self.seed, seed, rollout, turn)))
        if rng.random() >= self.accuracy or turn >= len(oracle):
            wrong = env.wrong_trajectories(seed)
            return wrong[0][-1] if wrong else "I cannot complete this."
        return oracle[turn]
