"""Task-level contrast: group runs by task, pair successes with failures, flag benchmark problems.

A task is keyed "<benchmark>:<task_id>" so that τ² airline task "7" and retail task "7" stay apart.
Tasks that fail for every agent (at least two distinct agents tried) are listed for review as
possible benchmark errors; failures whose gold breaks the policy are attributed to the benchmark
by `attribution`, from each run alone.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tracegym.schema import Trajectory


def task_key(trajectory: Trajectory) -> str:
    return f"{trajectory.source.benchmark}:{trajectory.task_id}"


def agent_name(trajectory: Trajectory) -> str:
    return f"{trajectory.source.agent}/{trajectory.source.model}"


@dataclass
class TaskContrast:
    """One task's successes and failures (trajectory ids) and their same-task pairs (success, failure)."""

    task: str
    successes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(s, f) for s in self.successes for f in self.failures]


def contrast(trajectories: list[Trajectory]) -> list[TaskContrast]:
    """Every task with both outcomes, sorted by task key."""
    by_task: dict[str, TaskContrast] = {}
    for trajectory in trajectories:
        entry = by_task.setdefault(task_key(trajectory), TaskContrast(task_key(trajectory)))
        (entry.successes if trajectory.success else entry.failures).append(trajectory.id)
    return [c for _, c in sorted(by_task.items()) if c.successes and c.failures]


def failing_for_every_agent(trajectories: list[Trajectory]) -> list[dict[str, Any]]:
    """Tasks that no agent solved, among tasks tried by at least two distinct agents."""
    runs: dict[str, list[Trajectory]] = defaultdict(list)
    for trajectory in trajectories:
        runs[task_key(trajectory)].append(trajectory)
    report = []
    for task, members in sorted(runs.items()):
        agents = sorted({agent_name(t) for t in members})
        if len(agents) >= 2 and not any(t.success for t in members):
            report.append({"task": task, "reason": "fails for every agent", "runs": len(members), "agents": agents})
    return report
