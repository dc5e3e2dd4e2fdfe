"""Task-level contrast: group runs by task, pair successes with failures, flag benchmark problems.

A task is keyed "<benchmark>:<task_id>" so that τ² airline task "7" and retail task "7" stay apart.
Two kinds of benchmark trouble are reported instead of blamed on agents: tasks that fail for
every agent (at least two distinct agents tried), and tasks whose gold actions differ from a
reference task set (τ² corrected airline gold actions between v0.2.0 and v1.0).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracegym.analysis.detectors import canonical
from tracegym.schema import Trajectory

# Airline tasks whose gold actions τ²-bench corrected between task sets v0.2.0 and v1.0
# (../shared/data/README.md); used only when no reference tasks.json can be found.
KNOWN_GOLD_CORRECTIONS: dict[str, frozenset[str]] = {
    "tau2-airline": frozenset({"2", "7", "9", "23", "27", "29", "33", "35", "37", "38", "44"}),
}


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


def load_reference_tasks(path: Path) -> dict[str, list[dict[str, Any]]]:
    """{task id: gold actions} from a τ² tasks.json."""
    tasks = json.loads(Path(path).read_text(encoding="utf-8"))
    return {str(t["id"]): ((t.get("evaluation_criteria") or {}).get("actions") or []) for t in tasks}


def find_reference_tasks(inputs: list[Path], domain: str) -> Path | None:
    """The nearest `domains/<domain>/tasks.json` above any input path (the τ² data layout)."""
    for path in inputs:
        for parent in Path(path).resolve().parents:
            candidate = parent / "domains" / domain / "tasks.json"
            if candidate.is_file():
                return candidate
    return None


def _action_key(action: dict[str, Any]) -> str:
    return canonical([action.get("name"), action.get("arguments") or {}])


@dataclass(frozen=True)
class GoldChange:
    """Why a task's gold is suspect; `stale` are the run's gold actions the reference dropped or
    changed and `added` the reference's actions the run's gold lacks (None: no reference file)."""

    reason: str
    stale: tuple[dict[str, Any], ...] | None = None
    added: tuple[dict[str, Any], ...] | None = None


def gold_changes(trajectories: list[Trajectory], inputs: list[Path] = ()) -> dict[str, GoldChange]:
    """{task key: GoldChange} for τ tasks whose gold actions differ from the reference task set.

    The reference is the domain's current tasks.json found beside the inputs; without one, the
    known corrections list is used and the reason says so.
    """
    changed: dict[str, GoldChange] = {}
    references: dict[str, dict[str, list[dict[str, Any]]] | None] = {}
    for trajectory in trajectories:
        domain = trajectory.metadata.get("domain")
        if not trajectory.source.benchmark.startswith("tau") or not domain or "gold_actions" not in trajectory.diagnostics:
            continue
        if domain not in references:
            found = find_reference_tasks(inputs, domain)
            references[domain] = load_reference_tasks(found) if found else None
        reference = references[domain]
        key = task_key(trajectory)
        if reference is not None:
            if trajectory.task_id not in reference:
                continue
            ran = trajectory.diagnostics["gold_actions"]
            new = reference[trajectory.task_id]
            stale = tuple(a for a in ran if _action_key(a) not in {_action_key(b) for b in new})
            added = tuple(a for a in new if _action_key(a) not in {_action_key(b) for b in ran})
            if stale or added:
                changed[key] = GoldChange("gold actions differ from the current task set (graded on an older version)",
                                          stale, added)
        elif trajectory.task_id in KNOWN_GOLD_CORRECTIONS.get(trajectory.source.benchmark, ()):
            changed[key] = GoldChange("gold actions corrected in a later task-set version (known list; no tasks.json found)")
    return changed
