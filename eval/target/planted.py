"""Planted capability gaps on the hotel desk: demonstrations and scripted runs that show one
capability's characteristic mistake (`Task.slips`, see `kinds`) in the task kinds exercising it.

A gap is a capability of `kinds.GAP_CAPABILITIES`, or "" for none. Where a task's kind exercises the
gap and the task has a slip for it, the gapped agent plays the slip; elsewhere it plays the oracle.

- `GappedTarget(config, gap)`: the target whose `oracle(seed)` is that demonstration (what the
  base agent's SFT plays with `base_agent.gap` set); grading, tools and users are the target's,
  and an episode's turn limit covers its demonstration as it covers the oracle.
- `planted_runs(config, gap, trials, slip_rate, seed)`: a model-free gapped agent on the train
  split, for checking the diagnosis against a known answer: every train task `trials` times, the
  oracle except in a share `slip_rate` of the gap's episodes (`slip_plan`), which play the slip.
- `write_planted_runs(records, folder, config)`: those records as the loop writes its runs (a
  τ²-bench Results file and trajectories.jsonl, `runs.write_runs`), which `tracegym diagnose`
  reads.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from tracegym.eval.target.config import TargetConfig
from tracegym.eval.target.environment import EpisodeRecord, TargetEnvironment
from tracegym.eval.target.kinds import GAP_CAPABILITIES, list_tasks
from tracegym.eval.target.runs import play_turns, results_name, write_runs
from tracegym.eval.target.tasks import Task
from tracegym.eval.target.users import UserSimulator

RESULTS_DIR = "results"  # where `write_planted_runs` puts the Results file, apart from trajectories.jsonl
TRAJECTORIES_FILE = "trajectories.jsonl"


def check_gap(gap: str) -> str:
    """`gap` when it is "" or a capability with slips; ValueError naming the choices otherwise."""
    if gap and gap not in GAP_CAPABILITIES:
        raise ValueError(f"no task kind shows a planted mistake of {gap!r} (gaps: {', '.join(GAP_CAPABILITIES)})")
    return gap


def demonstration(task: Task, gap: str) -> tuple[str, ...]:
    """The turns a gapped agent plays on `task`: its slip for `gap` where it has one, else its oracle."""
    return task.slips.get(gap, task.oracle) if gap else task.oracle


class GappedTarget(TargetEnvironment):
    """The hotel desk whose demonstrations carry the planted gap: `oracle(seed)` is
    `demonstration(task, gap)` (earning less than 1.0 on the gap's tasks that have a slip), and an
    episode's turn limit is that of its oracle or of its demonstration, whichever is longer."""

    def __init__(self, config: TargetConfig | None = None, gap: str = "", user: UserSimulator | None = None) -> None:
        super().__init__(config, user)
        self.gap = check_gap(gap)

    def oracle(self, seed: int) -> list[str]:
        return list(demonstration(self.task(seed), self.gap)) if self.gap else super().oracle(seed)

    def turn_limit(self, task: Task) -> int:
        slack, longest = self.config.turn_slack, max(len(task.oracle), len(demonstration(task, self.gap)))
        return self.config.max_turns if slack is None else min(self.config.max_turns, longest + slack)


def slip_plan(tasks: Sequence[Task], gap: str, trials: int, slip_rate: float, seed: int) -> set[tuple[int, int]]:
    """The (task seed, trial) episodes that slip: round(slip_rate x n) of the n episodes of tasks
    with a slip for `gap` (none when `gap` is ""), chosen by a shuffle seeded by `seed` and `gap`."""
    if not 0.0 <= slip_rate <= 1.0 or trials < 1:
        raise ValueError(f"slip_rate must be in [0, 1] and trials >= 1, got {slip_rate} and {trials}")
    episodes = [(task.seed, trial) for task in tasks if gap in task.slips for trial in range(trials)]
    random.Random(f"planted-{seed}-{gap}").shuffle(episodes)
    return set(episodes[: round(slip_rate * len(episodes))])


def planted_runs(
    config: TargetConfig, gap: str, trials: int = 2, slip_rate: float = 0.8, seed: int = 0
) -> list[EpisodeRecord]:
    """The scripted gapped agent's episodes on the train split of `config`, against the scripted
    user: each task `trials` times (trial numbers 0..trials-1), the slip on the episodes of
    `slip_plan` and the oracle elsewhere; in task seed order, then trial order."""
    env = GappedTarget(config, check_gap(gap))
    tasks = list_tasks(config, "train")
    slipping = slip_plan(tasks, gap, trials, slip_rate, seed)
    return [
        play_turns(
            env, task.seed, list(demonstration(task, gap) if (task.seed, trial) in slipping else task.oracle), trial
        )
        for task in tasks
        for trial in range(trials)
    ]


def write_planted_runs(
    records: Sequence[EpisodeRecord], folder: str | Path, config: TargetConfig, gap: str
) -> tuple[Path, Path]:
    """Write `records` into `folder`: the τ² Results file under `results/` (what `tracegym diagnose`
    is given) and `trajectories.jsonl` beside it; returns the two paths."""
    folder = Path(folder)
    agent, model = "scripted_gapped_agent", f"oracle+{gap or 'no'}-gap"
    results = folder / RESULTS_DIR / results_name(agent, model, records)
    write_runs(GappedTarget(config, gap), records, results, folder / TRAJECTORIES_FILE, agent=agent, model=model)
    return results, folder / TRAJECTORIES_FILE
