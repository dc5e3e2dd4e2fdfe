"""Held-out reward of a policy: mean episode reward on evaluation seeds, without hints, with a
95% interval (normal approximation over seeds, after averaging each seed's rollouts)."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tracegym.config import RolloutConfig
from tracegym.generation import HFBackend, SamplingConfig
from tracegym.rollout import run_episodes
from tracegym.synth_envs.base import Environment


def mean_interval(values: Sequence[float]) -> dict[str, float]:
    """Mean, n and the 95% normal interval (mean ± 1.96·s/√n; zero width for n < 2)."""
    array = np.asarray(values, dtype=np.float64)
    half = 1.96 * array.std(ddof=1) / math.sqrt(len(array)) if len(array) > 1 else 0.0
    return {"mean": float(array.mean()), "low": float(array.mean() - half), "high": float(array.mean() + half), "n": len(array)}


def heldout_reward(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    env_factory: Callable[[], Environment],
    seeds: Sequence[int],
    rollout: RolloutConfig,
    rollouts_per_seed: int,
    sampling_seed: int = 12_345,
) -> dict[str, float]:
    """Reward of `model` on `seeds` (unhinted, sampled per `rollout`): per-seed mean over
    `rollouts_per_seed` rollouts, then mean_interval."""
    model.eval()
    params = SamplingConfig(max_new_tokens=rollout.max_new_tokens, temperature=rollout.temperature, seed=sampling_seed)
    backend = HFBackend(model, tokenizer, batch_size=32)
    episodes = run_episodes(backend, env_factory, list(seeds), rollouts_per_seed, params, hint_fraction=0.0)
    per_seed = [
        float(np.mean([e.reward for e in episodes[i : i + rollouts_per_seed]]))
        for i in range(0, len(episodes), rollouts_per_seed)
    ]
    return mean_interval(per_seed)
