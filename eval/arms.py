"""The loop's held-out arms: each policy plays the target's held-out split at the same seeds,
greedily; its runs are written as τ² Results + trajectories (so the loop can go round) and its
figures as `metrics.json` in its own folder.

Arms: `base` (the base agent), `adapter_<capability>` (one capability adapter alone),
`task_router` (the paper's v1 router: one adapter per task), `mixture` (the token-routed mixture,
loaded from the routed folder, `moe_router.load_policy`) and `plain_grpo` (GRPO directly on the
target's train split).

The task router's arm plays nothing itself: it picks a slot per task from the task's first user
message, and a task routed to a slot is played exactly as that slot's own arm plays it (greedy,
same seed), so its episode is that arm's, read back from the arm's `episodes.jsonl`. The arms it
routes to are evaluated first (`base` and every `adapter_<capability>`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peft import PeftModel

from tracegym.adapters.train import load_base
from tracegym.errors import UserError
from tracegym.eval.play import outcomes, play_target
from tracegym.eval.target import EpisodeRecord, TargetConfig, make_target, write_runs
from tracegym.eval.target.config import HELDOUT_BASE
from tracegym.files import write_text_atomic
from tracegym.generation import SamplingConfig
from tracegym.moe_router.folder import load_mixture, task_router_for
from tracegym.moe_router.folder import load_policy as load_routed
from tracegym.schema import Message
from tracegym.stats import mean_interval

METRICS_FILE = "metrics.json"
RESULTS_DIR = "results"
TRAJECTORIES_FILE = "trajectories.jsonl"
EPISODES_FILE = "episodes.jsonl"
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
    """Per-seed rewards, successes and task kinds of `records` with means and 95% intervals, and the
    counts."""
    per_seed = outcomes(records)
    kind_of = {r.task.seed: r.task.kind for r in records}
    per_seed["kinds"] = [kind_of[seed] for seed in per_seed["seeds"]]
    return {
        "episodes": len(records),
        "successes": sum(r.reward >= 1.0 for r in records),
        "failures": sum(r.reward < 1.0 for r in records),
        "success": mean_interval(per_seed["success"]),
        "reward": mean_interval(per_seed["reward"]),
        "per_seed": per_seed,
    }


def adapter_arm(capability: str) -> str:
    """The arm name of the adapter trained for `capability`."""
    return f"adapter_{capability}"


def write_episodes(records: list[EpisodeRecord], path: Path) -> None:
    """`records` as JSON lines (the task is stored by seed: the target regenerates it)."""
    lines = [
        json.dumps(
            {
                "seed": r.task.seed,
                "trial": r.trial,
                "messages": [m.model_dump(mode="json") for m in r.messages],
                "reward": r.reward,
                "reward_info": r.reward_info,
                "termination_reason": r.termination_reason,
            }
        )
        for r in records
    ]
    write_text_atomic(path, "".join(line + "\n" for line in lines))


def read_episodes(path: Path, target: TargetConfig) -> list[EpisodeRecord]:
    """The records `write_episodes` wrote, their tasks regenerated from `target`."""
    env = make_target(target)
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return [
            EpisodeRecord(
                env.task(row["seed"]),
                [Message.model_validate(m) for m in row["messages"]],
                row["reward"],
                row["reward_info"],
                row["termination_reason"],
                row["trial"],
            )
            for row in rows
        ]
    except (OSError, ValueError, KeyError, TypeError) as error:  # pydantic's ValidationError is a ValueError
        raise UserError(f"{path}: cannot read the arm's episodes ({type(error).__name__}: {error})") from None


def task_routed_records(
    folder: str, target: TargetConfig, seeds: list[int], eval_root: Path
) -> tuple[list[EpisodeRecord], list[str]]:
    """The v1 task router's episodes on `seeds`, and the arm each task was routed to: a slot per
    task, chosen from the task's first user message, and that slot's arm's episode of the task
    (read from `eval_root/<arm>/episodes.jsonl`)."""
    model, tokenizer, router, manifest = load_mixture(folder)
    chooser = task_router_for(model, tokenizer, router, manifest)
    env = make_target(target)
    slot_arms = ["base", *(adapter_arm(entry.capability) for entry in manifest.adapters)]
    chosen = [slot_arms[slot] for slot in chooser.choose([env.reset(seed) for seed in seeds])]
    played = {
        name: {r.task.seed: r for r in read_episodes(eval_root / name / EPISODES_FILE, target)} for name in set(chosen)
    }
    missing = [f"{seed} ({name})" for seed, name in zip(seeds, chosen) if seed not in played[name]]
    if missing:
        raise UserError(
            f"{eval_root}: the task router's arm reuses its arms' held-out episodes; "
            f"none for seeds {', '.join(missing)}"
        )
    return [played[name][seed] for seed, name in zip(seeds, chosen)], chosen


def evaluate_arm(
    arm: Arm, target: TargetConfig, max_new_tokens: int | None, out_dir: Path, progress: bool = True
) -> list[Path]:
    """Play `arm` greedily on the held-out split (with a progress bar of its episodes); write its runs
    and metrics.json into `out_dir`."""
    started = time.perf_counter()
    params = SamplingConfig(max_new_tokens=max_new_tokens, temperature=0.0, seed=GREEDY_SEED)
    routing: dict[str, list[str]] = {}  # the task router's arm: the arm each task went to
    if arm.kind == "routed" and arm.route == "task":
        records, routing["routed_to"] = task_routed_records(arm.source, target, heldout_seeds(target), out_dir.parent)
    else:
        if arm.kind == "routed":
            model, tokenizer = load_routed(arm.source, arm.route)
        else:
            model, tokenizer = load_base(arm.base_model)
            if arm.kind == "peft":  # merged: the same policy, decoded at the base model's speed
                model = PeftModel.from_pretrained(model, arm.source).merge_and_unload()
        records = play_target(model, tokenizer, target, heldout_seeds(target), 1, params, progress)
    results = out_dir / RESULTS_DIR / f"{arm.name}.json"
    write_runs(
        make_target(target),
        records,
        results,
        out_dir / TRAJECTORIES_FILE,
        agent=f"tracegym:{arm.name}",
        model=arm.base_model,
    )
    write_episodes(records, out_dir / EPISODES_FILE)
    metrics = {
        "arm": arm.name,
        "source": arm.source,
        "route": arm.route,
        "rollouts": arm.rollouts,
        "calibration_rollouts": arm.calibration_rollouts,
        "train_seconds": round(arm.train_seconds, 1),
        "eval_seconds": round(time.perf_counter() - started, 1),
        **routing,
        **split_summary(records),
    }
    (out_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=1))
    return [out_dir / METRICS_FILE, results, out_dir / TRAJECTORIES_FILE, out_dir / EPISODES_FILE]
