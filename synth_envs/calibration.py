"""Calibrate an environment family's difficulty to a policy.

For a policy (a generation backend plus sampling settings, or any `Policy`), measure the mean
reward over seeds × rollouts at a knob setting and move along the family's difficulty ladder
(`Environment.ladder`, easy -> hard) by bisection until the mean lands in the target band
(default 0.2-0.6). Every measured point is kept as the calibration curve (knobs -> mean reward,
success rate, share of all-0 and all-1 groups). papers/TRACE.md §1 uses 100 seeds × 16
rollouts at T = 0.7; the defaults here are smaller so CPU runs finish, and are arguments.

`measure` is any callable (family, knobs, seeds, rollouts) -> rewards grouped per seed, so the
search runs the same against a real backend (`backend_measure`, through tracegym.rollout) and a
scripted policy (`policy_measure`).
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from tracegym.environment import StepResult
from tracegym.synth_envs.base import Environment
from tracegym.synth_envs.registry import get_family, make_env

logger = logging.getLogger(__name__)

Measure = Callable[[str, dict[str, Any], Sequence[int], int], list[list[float]]]


@dataclass(frozen=True)
class Band:
    """Target mean reward band and the paper's group-level acceptance limits."""

    low: float = 0.2
    high: float = 0.6
    max_all_zero: float = 0.2
    max_all_one: float = 0.2


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
    def from_groups(cls, knobs: dict[str, Any], index: int, groups: list[list[float]]) -> "Point":
        rewards = [r for group in groups for r in group]
        if not rewards:
            raise ValueError("no rewards measured")
        return cls(knobs, index, round(sum(rewards) / len(rewards), 4), round(sum(r >= 1.0 for r in rewards) / len(rewards), 4),
                   round(sum(all(r == 0.0 for r in g) for g in groups) / len(groups), 4),
                   round(sum(all(r >= 1.0 for r in g) for g in groups) / len(groups), 4), len(groups), len(groups[0]))

    def in_band(self, band: Band) -> bool:
        return band.low <= self.mean_reward <= band.high

    def accepted(self, band: Band) -> bool:
        """The paper's full acceptance: mean and success in band, few degenerate groups."""
        return (self.in_band(band) and band.low <= self.success_rate <= band.high
                and self.all_zero_groups <= band.max_all_zero and self.all_one_groups <= band.max_all_one)


@dataclass
class Calibration:
    """The search result for one family: chosen knobs and the measured curve."""

    family: str
    band: Band
    knobs: dict[str, Any]
    in_band: bool
    accepted: bool
    curve: list[Point] = field(default_factory=list)
    policy: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"family": self.family, "policy": self.policy, "band": asdict(self.band), "knobs": self.knobs,
                "in_band": self.in_band, "accepted": self.accepted,
                "curve": [asdict(p) for p in sorted(self.curve, key=lambda p: p.ladder_index)]}


def calibrate(family: str, measure: Measure, seeds: Sequence[int] = range(20), rollouts: int = 4,
              band: Band = Band(), policy: str = "") -> Calibration:
    """Bisect the family's ladder (easy -> hard) until the mean reward is inside `band`.

    Too easy (mean above the band) moves harder, too hard moves easier. If no rung lands in the
    band, the rung whose mean is closest to the band is chosen and `in_band` is False.
    """
    ladder = get_family(family).ladder
    if not ladder:
        raise ValueError(f"family '{family}' declares no difficulty ladder")
    low, high, curve = 0, len(ladder) - 1, []
    while low <= high:
        middle = (low + high) // 2
        point = Point.from_groups(dict(ladder[middle]), middle, measure(family, dict(ladder[middle]), seeds, rollouts))
        curve.append(point)
        logger.info("%s rung %d %s: mean reward %.3f, success %.2f", family, middle, point.knobs, point.mean_reward,
                    point.success_rate)
        if point.in_band(band):
            break
        if point.mean_reward > band.high:
            low = middle + 1
        else:
            high = middle - 1
    centre = (band.low + band.high) / 2
    # ties (e.g. a policy that solves every rung) go to the hardest rung when too easy, the easiest when too hard
    best = min(curve, key=lambda p: (not p.in_band(band), round(abs(p.mean_reward - centre), 6),
                                     -p.ladder_index if p.mean_reward > band.high else p.ladder_index))
    return Calibration(family, band, best.knobs, best.in_band(band), best.accepted(band), curve, policy)


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


def backend_measure(backend: Any, params: Any, hint_fraction: float = 0.0, progress: bool = True) -> Measure:
    """A `Measure` that rolls out a generation backend with `tracegym.rollout.run_episodes`."""
    from tracegym.rollout import run_episodes

    def measure(family: str, knobs: dict[str, Any], seeds: Sequence[int], rollouts: int) -> list[list[float]]:
        episodes = run_episodes(backend, lambda: make_env(family, **knobs), list(seeds), rollouts, params,
                                hint_fraction=hint_fraction, progress=progress)
        return [[e.reward for e in episodes[i * rollouts:(i + 1) * rollouts]] for i in range(len(seeds))]

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
