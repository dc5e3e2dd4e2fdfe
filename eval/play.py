"""A policy plays the target environment: batched episodes (tracegym.rollout) kept as τ² records.

`play_target` rolls `model` out (moved to the accelerator where there is one) on task seeds of the
target, `trials` episodes per seed, and returns each episode's `EpisodeRecord` (seed-major, trial
numbers 0..trials-1) with the target's own verdict. An episode whose turn hit its token budget is
cut and graded as it stands (`TargetEnvironment.cut`), so every episode has a verdict and a τ²
record. `outcomes` condenses records into the per-seed lists that `tracegym.stats` summarises.
"""

from __future__ import annotations

from collections.abc import Sequence

from accelerate import PartialState
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tracegym.eval.target import EpisodeRecord, TargetConfig, TargetEnvironment, make_target
from tracegym.generation import HFBackend, SamplingConfig
from tracegym.rollout import run_episodes


def play_target(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    target: TargetConfig,
    seeds: Sequence[int],
    trials: int,
    params: SamplingConfig,
    progress: bool = True,
) -> list[EpisodeRecord]:
    """`trials` episodes of `model` per seed under `params` (temperature 0: greedy)."""
    envs: list[TargetEnvironment] = []

    def factory() -> TargetEnvironment:
        env = make_target(target)
        envs.append(env)
        return env

    model.to(PartialState().device).eval()  # the GPU where there is one
    backend = HFBackend(model, tokenizer, batch_size=64)
    episodes = run_episodes(backend, factory, list(seeds), trials, params, progress=progress)
    played = envs[len(envs) - len(episodes) :]  # the first may be the turn-budget probe
    records = []
    for index, env in enumerate(played):
        if not env.ended:
            env.cut()
        records.append(env.record(trial=index % trials))
    return records


def outcomes(records: Sequence[EpisodeRecord]) -> dict[str, list[float]]:
    """Per-seed mean reward and success share over the seed's trials, in seed order of first appearance."""
    by_seed: dict[int, list[float]] = {}
    for record in records:
        by_seed.setdefault(record.task.seed, []).append(record.reward)
    rewards = [sum(values) / len(values) for values in by_seed.values()]
    success = [sum(value >= 1.0 for value in values) / len(values) for values in by_seed.values()]
    return {"seeds": list(by_seed), "reward": rewards, "success": success}
