"""The loop's held-out arms: each policy plays the target's held-out split at the same seeds,
greedily; its runs are written as τ² Results + trajectories (so the loop can go round) and its
figures as `metrics.json` in its own folder.

Arms: `base` (the base agent), `adapter_<name>` (one capability adapter alone), `task_router`
(the paper's v1 router: one adapter per task), `mixture` (the token-routed mixture) and
`plain_grpo` (GRPO directly on the target's train split). All but the last are loaded from the
routed folder (`moe_router.load_policy`), whose base is the base agent.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peft import PeftModel

from tracegym.adapters.train import load_base
from tracegym.eval.play import outcomes, play_target
from tracegym.eval.target import EpisodeRecord, TargetConfig, make_target, write_runs
from tracegym.eval.target.config import HELDOUT_BASE
from tracegym.generation import SamplingConfig
from tracegym.moe_router.folder import load_mixture, task_router_for
from tracegym.moe_router.folder import load_policy as load_routed
from tracegym.stats import mean_interval

METRICS_FILE = "metrics.json"
RESULTS_DIR = "results"
TRAJECTORIES_FILE = "trajectories.jsonl"
GREEDY_SEED = 12_345


@dataclass(frozen=True)
class Arm:
    """A policy to evaluate: `kind` "model" (the model folder `base_model`), "routed" (route `route`
    of the routed folder `source`) or "peft" (the adapter folder `source` on `base_model`); its
    training cost is carried into the metrics."""

    name: str
    kind: str
    source: str
    route: str
    base_model: str
    rollouts: int
    calibration_rollouts: int
    train_seconds: float


def heldout_seeds(target: TargetConfig) -> list[int]:
    return list(range(HELDOUT_BASE, HELDOUT_BASE + target.heldout_tasks))


def split_summary(records: list[EpisodeRecord]) -> dict[str, Any]:
    """Per-seed rewards and successes of `records` with means and 95% intervals, and the counts."""
    per_seed = outcomes(records)
    return {
        "episodes": len(records),
        "successes": sum(r.reward >= 1.0 for r in records),
        "failures": sum(r.reward < 1.0 for r in records),
        "success": mean_interval(per_seed["success"]),
        "reward": mean_interval(per_seed["reward"]),
        "per_seed": per_seed,
    }


def play_task_routed(folder: str, target: TargetConfig, seeds: list[int], params: SamplingConfig) -> list[EpisodeRecord]:
    """The v1 task router's arm: a slot per task, chosen from the task's first user message, then
    each slot's tasks played with the mixture forced to that slot; records in the order of `seeds`.

    Not one batch under the task-routing hook: the rollout engine shares KV caches across rows and
    turns, which is exact only while a token's route depends on the tokens before it, and a task
    route depends on a user message that comes after the system prompt.
    """
    model, tokenizer, router, manifest = load_mixture(folder)
    chooser = task_router_for(model, tokenizer, router, manifest)
    env = make_target(target)
    slots = chooser.choose([env.reset(seed) for seed in seeds])
    played: dict[int, EpisodeRecord] = {}
    for slot in sorted(set(slots)):
        group = [seed for seed, chosen in zip(seeds, slots) if chosen == slot]
        with router.forcing(slot):
            played.update(zip(group, play_target(model, tokenizer, target, group, 1, params)))
    return [played[seed] for seed in seeds]


def evaluate_arm(arm: Arm, target: TargetConfig, max_new_tokens: int | None, out_dir: Path) -> list[Path]:
    """Play `arm` greedily on the held-out split; write its runs and metrics.json into `out_dir`."""
    started = time.perf_counter()
    params = SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0, seed=GREEDY_SEED)
    if arm.kind == "routed" and arm.route == "task":
        records = play_task_routed(arm.source, target, heldout_seeds(target), params)
    else:
        if arm.kind == "routed":
            model, tokenizer = load_routed(arm.source, arm.route)
        else:
            model, tokenizer = load_base(arm.base_model)
            if arm.kind == "peft":
                model = PeftModel.from_pretrained(model, arm.source)
        records = play_target(model, tokenizer, target, heldout_seeds(target), 1, params)
    results = out_dir / RESULTS_DIR / f"{arm.name}.json"
    write_runs(make_target(target), records, results, out_dir / TRAJECTORIES_FILE, agent=f"tracegym:{arm.name}",
               model=arm.base_model)
    metrics = {"arm": arm.name, "source": arm.source, "route": arm.route, "rollouts": arm.rollouts,
               "calibration_rollouts": arm.calibration_rollouts, "train_seconds": round(arm.train_seconds, 1),
               "eval_seconds": round(time.perf_counter() - started, 1), **split_summary(records)}
    (out_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=1))
    return [out_dir / METRICS_FILE, results, out_dir / TRAJECTORIES_FILE]
