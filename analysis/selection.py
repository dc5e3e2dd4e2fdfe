"""Capability selection statistics (docs/method.md, "Capability selection") with task-bootstrap intervals.

Per labelling run r and capability c, over the trajectories that count (successes plus the
failures attributed to the agent):
    Cov  = lacking_failed / total_failed
    ER-  = lacking_failed / (lacking_failed + present_failed)
    ER+  = lacking_passed / (lacking_passed + present_passed)
    Δ    = ER- − ER+
Any ratio with an empty denominator is None (and so is Δ when either rate is). c is selected when
Cov ≥ ρ and Δ ≥ δ in at least K of the N runs (defaults ρ 0.10, δ 0.20, N the labeller's runs and K
80% of N rounded up: 8 of 10 for the judge, 1 of 1 for the deterministic detectors). The 95%
interval of the mean-over-runs Δ resamples tasks with replacement; the paired estimate compares
failures with successes of the same task.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, replace

import numpy as np

from tracegym.config import option
from tracegym.schema import Capability, CapabilityReport, CapabilityStats, Label, LabelValue

LACKING_FAILED, PRESENT_FAILED, LACKING_PASSED, PRESENT_PASSED = range(4)
EVIDENCE_KEPT = 3  # evidence items kept per explained failure


@dataclass(frozen=True)
class SelectionConfig:
    """Selection thresholds (docs/method.md, "Capability selection") and the task bootstrap of the Δ interval."""

    rho: float = option(0.10, "minimum coverage ρ: share of counted failures labelled LACKING")
    delta: float = option(0.20, "minimum Δ = ER− − ER+ (difference of two shares)")
    k: int | None = option(
        None,
        "labelling runs in which a capability must pass; none: 80% of N rounded up "
        "(1 of 1 for the deterministic detectors, 8 of 10 for the judge)",
    )
    n: int | None = option(None, "labelling runs expected; none: the labeller's runs (1 deterministic, --judge-runs)")
    bootstrap: int = option(1000, "bootstrap resamples over tasks for the 95% interval of Δ (0: no interval)")
    seed: int = option(0, "bootstrap seed")

    def for_runs(self, runs: int) -> SelectionConfig:
        """K and N made concrete for a labeller with `runs` runs (see the field help)."""
        n = self.n if self.n is not None else runs
        return replace(self, n=n, k=self.k if self.k is not None else max(1, math.ceil(0.8 * n)))


@dataclass(frozen=True)
class Outcome:
    """What selection needs to know about one trajectory: its task and whether it passed."""

    task: str
    success: bool


def ratio(numerator: float, denominator: float) -> float | None:
    return None if denominator == 0 else numerator / denominator


def run_stats(counts: np.ndarray, total_failed: float) -> tuple[float | None, float | None, float | None, float | None]:
    """(Cov, ER-, ER+, Δ) from the four counts [LF, PF, LP, PP] and the number of failures."""
    cov = ratio(counts[LACKING_FAILED], total_failed)
    er_minus = ratio(counts[LACKING_FAILED], counts[LACKING_FAILED] + counts[PRESENT_FAILED])
    er_plus = ratio(counts[LACKING_PASSED], counts[LACKING_PASSED] + counts[PRESENT_PASSED])
    delta = None if er_minus is None or er_plus is None else er_minus - er_plus
    return cov, er_minus, er_plus, delta


def passes(cov: float | None, delta: float | None, params: SelectionConfig) -> bool:
    return cov is not None and delta is not None and cov >= params.rho and delta >= params.delta


def _index(labels: list[Label], outcomes: dict[str, Outcome]) -> tuple[list[int], dict]:
    """Runs present and {(capability, run, trajectory_id): value} for counted trajectories."""
    table = {
        (label.capability, label.run, label.trajectory_id): label.value
        for label in labels
        if label.trajectory_id in outcomes
    }
    return sorted({label.run for label in labels}), table


def _per_task_counts(
    capability: str, runs: list[int], table: dict, outcomes: dict[str, Outcome], tasks: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """counts[run, task, 4] of LF/PF/LP/PP and failures[task] (all counted failures per task)."""
    position = {t: i for i, t in enumerate(tasks)}
    counts = np.zeros((len(runs), len(tasks), 4))
    failures = np.zeros(len(tasks))
    for trajectory_id, outcome in outcomes.items():
        t = position[outcome.task]
        if not outcome.success:
            failures[t] += 1
        for r, run in enumerate(runs):
            value = table.get((capability, run, trajectory_id), LabelValue.NA)
            if value == LabelValue.NA:
                continue
            lacking = value == LabelValue.LACKING
            slot = (
                (LACKING_FAILED if lacking else PRESENT_FAILED)
                if not outcome.success
                else (LACKING_PASSED if lacking else PRESENT_PASSED)
            )
            counts[r, t, slot] += 1
    return counts, failures


def _mean_delta(counts: np.ndarray, failures_total: float) -> float | None:
    deltas = [d for d in (run_stats(c, failures_total)[3] for c in counts) if d is not None]
    return float(np.mean(deltas)) if deltas else None


def bootstrap_delta(counts: np.ndarray, failures: np.ndarray, resamples: int, seed: int) -> tuple[float, float] | None:
    """95% percentile interval of the mean-over-runs Δ, resampling tasks with replacement."""
    n_tasks = counts.shape[1]
    if n_tasks == 0:
        return None
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n_tasks, np.full(n_tasks, 1.0 / n_tasks), size=resamples)  # (B, T)
    summed = np.einsum("bt,rtk->brk", weights, counts)  # (B, runs, 4)
    er_minus_den = summed[..., LACKING_FAILED] + summed[..., PRESENT_FAILED]
    er_plus_den = summed[..., LACKING_PASSED] + summed[..., PRESENT_PASSED]
    with np.errstate(invalid="ignore", divide="ignore"):
        delta = summed[..., LACKING_FAILED] / er_minus_den - summed[..., LACKING_PASSED] / er_plus_den
    finite = np.isfinite(delta)
    runs_defined = finite.sum(axis=1)
    per_sample = np.where(finite, delta, 0.0).sum(axis=1)[runs_defined > 0] / runs_defined[runs_defined > 0]
    if per_sample.size == 0:
        return None
    low, high = np.percentile(per_sample, [2.5, 97.5])
    return float(low), float(high)


def paired_delta(
    capability: str, runs: list[int], table: dict, outcomes: dict[str, Outcome]
) -> tuple[float | None, int]:
    """Mean over tasks with both outcomes of (lacking rate among its failures − among its
    successes), non-NA labels only, averaged over runs; and how many tasks contributed."""
    by_task: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    for trajectory_id, outcome in outcomes.items():
        by_task[outcome.task].append((trajectory_id, outcome.success))
    differences = []
    for members in by_task.values():
        per_run = []
        for run in runs:
            rates = {}
            for success in (False, True):
                values = [table.get((capability, run, t), LabelValue.NA) for t, s in members if s == success]
                values = [v for v in values if v != LabelValue.NA]
                rates[success] = ratio(sum(v == LabelValue.LACKING for v in values), len(values))
            if rates[False] is not None and rates[True] is not None:
                per_run.append(rates[False] - rates[True])
        if per_run:
            differences.append(float(np.mean(per_run)))
    return (float(np.mean(differences)) if differences else None), len(differences)


def majority(labels: list[Label]) -> dict[tuple[str, str], Label]:
    """{(trajectory_id, capability): the label carrying the most common value over runs}; ties
    go to PRESENT, then NA (the lean-to-PRESENT rule)."""
    grouped: dict[tuple[str, str], list[Label]] = defaultdict(list)
    for label in labels:
        grouped[(label.trajectory_id, label.capability)].append(label)
    order = {LabelValue.PRESENT: 0, LabelValue.NA: 1, LabelValue.LACKING: 2}
    chosen = {}
    for key, group in grouped.items():
        votes = Counter(label.value for label in group)
        value = min(votes, key=lambda v: (-votes[v], order[v]))
        chosen[key] = next(label for label in group if label.value == value)
    return chosen


def select(
    capabilities: list[Capability],
    labels: list[Label],
    outcomes: dict[str, Outcome],
    params: SelectionConfig = SelectionConfig(),
) -> CapabilityReport:
    """The CapabilityReport over the counted trajectories in `outcomes` (pass only agent-caused
    failures and all successes to exclude the rest). `params.n` is the number of labelling runs
    expected (default: the runs in `labels`); runs missing from `labels` count as failed runs for
    the K-of-N rule."""
    runs, table = _index(labels, outcomes)
    params = params.for_runs(max(len(runs), 1))
    tasks = sorted({o.task for o in outcomes.values()})
    total_failed = sum(not o.success for o in outcomes.values())
    voted = majority([label for label in labels if label.trajectory_id in outcomes])
    stats: list[CapabilityStats] = []
    for capability in capabilities:
        counts, failures = _per_task_counts(capability.name, runs, table, outcomes, tasks)
        per_run = [run_stats(c, total_failed) for c in counts.sum(axis=1)]
        passed = sum(passes(cov, d, params) for cov, _, _, d in per_run)
        paired, paired_tasks = paired_delta(capability.name, runs, table, outcomes)
        explained = [
            {
                "trajectory_id": t,
                "task_id": outcomes[t].task,
                "evidence": [e.model_dump() for e in voted[(t, capability.name)].evidence[:EVIDENCE_KEPT]],
            }
            for t in sorted(outcomes)
            if not outcomes[t].success
            and (t, capability.name) in voted
            and voted[(t, capability.name)].value == LabelValue.LACKING
        ]
        stats.append(
            CapabilityStats(
                capability=capability,
                cov=[c for c, _, _, _ in per_run],
                er_minus=[e for _, e, _, _ in per_run],
                er_plus=[e for _, _, e, _ in per_run],
                delta=[d for _, _, _, d in per_run],
                runs_passed=passed,
                selected=passed >= params.k,
                delta_mean=_mean_delta(counts.sum(axis=1), total_failed),
                delta_ci=bootstrap_delta(counts, failures, params.bootstrap, params.seed),
                paired_delta=paired,
                paired_tasks=paired_tasks,
                explained_failures=explained,
            )
        )
    selected = sorted((s for s in stats if s.selected), key=lambda s: -(s.delta_mean or 0.0))
    return CapabilityReport(
        capabilities=stats,
        selected=[s.capability.name for s in selected],
        union_coverage=union_coverage([s.capability.name for s in selected], voted, outcomes),
        params={
            "rho": params.rho,
            "delta": params.delta,
            "k": params.k,
            "n": params.n,
            "runs_seen": len(runs),
            "bootstrap": params.bootstrap,
            "seed": params.seed,
            "counted_failures": total_failed,
            "counted_successes": len(outcomes) - total_failed,
        },
    )


def union_coverage(
    selected: list[str], voted: dict[tuple[str, str], Label], outcomes: dict[str, Outcome]
) -> float | None:
    """Share of counted failures labelled LACKING (by vote over runs) on at least one selected capability."""
    failed = [t for t, o in outcomes.items() if not o.success]
    covered = sum(
        any(voted.get((t, c)) is not None and voted[(t, c)].value == LabelValue.LACKING for c in selected)
        for t in failed
    )
    return ratio(covered, len(failed))
