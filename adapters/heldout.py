"""Held-out scoring of a policy on an environment's evaluation seeds, unhinted, per seed: one greedy
episode (unless turned off) and `sampled` episodes at the rollout temperature. Policies scored on
the same seeds with the same sampling seed compare pairwise (`compare`): the sampling seed of every (seed, rollout,
turn) is fixed by the engine, not by what else is in the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tracegym.config import RolloutConfig
from tracegym.environment import Environment
from tracegym.generation import HFBackend, SamplingConfig
from tracegym.rollout import fit_turn_budget, run_episodes
from tracegym.stats import mean_interval, paired_difference

SAMPLING_SEED = 12_345  # the same for every policy, so sampled episodes pair up
METRICS = ("greedy_reward", "greedy_success", "sampled_reward", "sampled_success")


@dataclass
class HeldoutScores:
    """Per-seed held-out results (lists aligned with `seeds`, empty for a kind of episode not
    scored); sampled values are means over the seed's sampled rollouts."""

    seeds: list[int]
    greedy_reward: list[float]
    greedy_success: list[float]
    sampled_reward: list[float]
    sampled_success: list[float]
    sampled_rollouts: int

    def summary(self) -> dict[str, dict[str, float]]:
        """Mean and 95% interval of each metric over seeds."""
        return {metric: mean_interval(getattr(self, metric)) for metric in METRICS if getattr(self, metric)}

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HeldoutScores:
        return cls(**{key: data[key] for key in ("seeds", *METRICS, "sampled_rollouts")})


def _per_seed(rewards: list[float], rollouts: int) -> tuple[list[float], list[float]]:
    groups = np.asarray(rewards, dtype=np.float64).reshape(-1, rollouts)
    return groups.mean(axis=1).tolist(), (groups >= 1.0).mean(axis=1).tolist()


def score_heldout(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    env_factory: Callable[[], Environment],
    seeds: Sequence[int],
    rollout: RolloutConfig,
    sampled: int,
    progress: bool = False,
    greedy: bool = True,
) -> HeldoutScores:
    """One greedy (when `greedy`) and `sampled` unhinted episodes per seed of `model` (turn budget
    per `rollout`, fitted once to the environment when unset)."""
    if not greedy and not sampled:
        raise ValueError("held-out scoring needs greedy episodes or sampled ones")
    model.eval()
    rollout = fit_turn_budget(rollout, env_factory(), tokenizer)
    backend = HFBackend(model, tokenizer, batch_size=64)

    def scored(temperature: float, rollouts: int) -> tuple[list[float], list[float]]:
        params = SamplingConfig(max_new_tokens=rollout.max_new_tokens, temperature=temperature, seed=SAMPLING_SEED)
        episodes = run_episodes(backend, env_factory, list(seeds), rollouts, params, progress=progress)
        return _per_seed([e.reward for e in episodes], rollouts)

    greedy_reward, greedy_success = scored(0.0, 1) if greedy else ([], [])
    sampled_reward, sampled_success = scored(rollout.temperature, sampled) if sampled else ([], [])
    return HeldoutScores(list(seeds), greedy_reward, greedy_success, sampled_reward, sampled_success, sampled)


def compare(before: HeldoutScores, after: HeldoutScores, resamples: int = 10_000) -> dict[str, dict[str, float]]:
    """Paired bootstrap 95% interval of `after - before` for each metric both have."""
    if before.seeds != after.seeds:
        raise ValueError("a paired comparison needs both policies scored on the same seeds")
    return {
        metric: paired_difference(getattr(before, metric), getattr(after, metric), resamples)
        for metric in METRICS
        if getattr(before, metric) and getattr(after, metric)
    }
