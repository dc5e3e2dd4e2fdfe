"""The diagnosis pipeline over ingested trajectories: contrast, attribute, label, select.

`diagnose` returns a `Diagnosis` holding the CapabilityReport and everything the written report
quotes. Without a judge the deterministic detectors label (one run, N = K = 1); with one, its N
runs label and K-of-N applies. Failures not attributed to the agent, and runs with no grade,
are left out of the statistics unless `count_all_failures`. `DiagnoseConfig` holds the settings
(`tracegym diagnose` generates its flags from it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tracegym.analysis.attribution import FailureSource, attribute_deterministic, merge_judged, split
from tracegym.analysis.catalogue import catalogue_for
from tracegym.analysis.contrast import TaskContrast, contrast, failing_for_every_agent, task_key
from tracegym.analysis.detectors import label_deterministic
from tracegym.analysis.ingest import IngestResult
from tracegym.analysis.judge import JudgeConfig, JudgeResult, LLMJudge
from tracegym.analysis.proposer import propose
from tracegym.analysis.selection import Outcome, SelectionConfig, select
from tracegym.config import option
from tracegym.schema import Capability, CapabilityReport, Label, Trajectory


@dataclass
class Diagnosis:
    """The report plus the labels, attributions, contrasts and judge bookkeeping behind it."""

    report: CapabilityReport
    trajectories: list[Trajectory]
    labels: list[Label]
    sources: dict[str, FailureSource]
    contrasts: list[TaskContrast]
    judge: dict[str, JudgeResult] = field(default_factory=dict)
    proposed: list[Capability] = field(default_factory=list)
    ingest: IngestResult | None = None  # what reading the inputs repaired and skipped (set by the caller)


@dataclass
class DiagnoseConfig:
    """Settings of `tracegym diagnose`: the inputs, the labeller and the selection."""

    keep_going: bool = option(False, "skip bad input records (each is listed) instead of stopping")
    allow_empty: bool = option(
        False, "write empty outputs when the inputs hold no trajectory (otherwise: exit 1, outputs kept)"
    )
    gold_patches: str | None = option(
        None, "SWE-bench reference fixes: a JSON file {instance_id: patch} or JSONL lines"
    )
    count_all_failures: bool = option(False, "count user-simulator and benchmark failures in the statistics too")
    propose: bool = option(False, "ask the judge model to propose new capabilities (needs --judge-url)")
    selection: SelectionConfig = option(help="selection thresholds", factory=SelectionConfig)
    judge: JudgeConfig = option(help="the LLM judge", factory=JudgeConfig)


def attach_gold_patches(trajectories: list[Trajectory], path: Path) -> int:
    """Put reference fixes into `diagnostics.gold_patch` by task id, from a JSON object
    {instance_id: patch} or JSONL lines {"instance_id", "patch"}; returns how many matched."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        loaded = json.loads(text)
        patches = loaded if isinstance(loaded, dict) else {r["instance_id"]: r["patch"] for r in loaded}
    except json.JSONDecodeError:
        patches = {r["instance_id"]: r["patch"] for r in map(json.loads, filter(str.strip, text.splitlines()))}
    matched = 0
    for trajectory in trajectories:
        if trajectory.task_id in patches:
            trajectory.diagnostics["gold_patch"] = patches[trajectory.task_id]
            matched += 1
    return matched


def counted_outcomes(
    trajectories: list[Trajectory], sources: dict[str, FailureSource], count_all_failures: bool
) -> dict[str, Outcome]:
    """Successes and the failures that count (agent-caused unless `count_all_failures`)."""
    return {
        t.id: Outcome(task_key(t), t.success)
        for t in trajectories
        if t.reward is not None and (t.success or count_all_failures or sources[t.id].source == "agent")
    }


def benchmark_blamed(trajectories: list[Trajectory], sources: dict[str, FailureSource]) -> list[dict]:
    """Failures attributed to the benchmark, one entry per (task, reason) with how many failures."""
    keys = {t.id: task_key(t) for t in trajectories}
    grouped: dict[tuple[str, str], list[FailureSource]] = {}
    for found in sources.values():
        if found.source == "benchmark":
            grouped.setdefault((keys[found.trajectory_id], found.reason), []).append(found)
    return [
        {
            "task": task,
            "reason": reason,
            "failures_attributed_to_benchmark": len(members),
            "evidence": members[0].evidence.quote if members[0].evidence else "",
        }
        for (task, reason), members in sorted(grouped.items())
    ]


def diagnose(
    trajectories: list[Trajectory],
    inputs: list[Path],
    config: DiagnoseConfig | None = None,
    judge: LLMJudge | None = None,
    progress: bool = False,
) -> Diagnosis:
    """Run the whole analysis under `config` (defaults: deterministic detectors, the paper's ρ and δ);
    with `judge` the judge labels and, with `config.propose`, proposes capabilities. `inputs` are
    the paths the trajectories came from, recorded in the report: labels and attributions depend
    on each run alone."""
    config = config or DiagnoseConfig()
    capabilities = catalogue_for({t.source.benchmark for t in trajectories})
    contrasts = contrast(trajectories)
    sources = attribute_deterministic(trajectories)
    judged: dict[str, JudgeResult] = {}
    proposed: list[Capability] = []
    if judge is not None and config.propose:
        proposed = propose(judge.client, contrasts, {t.id: t for t in trajectories}, capabilities)
        capabilities = capabilities + proposed
    if judge is not None:
        undetermined = [t for t in trajectories if t.id in sources and sources[t.id].method == "default"]
        attributed, judged["attribution"] = judge.attribute_failures(undetermined, progress=progress)
        sources = merge_judged(sources, attributed)
        judged["labels"] = judge.label(trajectories, capabilities, progress=progress)
        labels = judged["labels"].labels
    else:
        labels = label_deterministic(trajectories, capabilities, progress=progress)
    params = config.selection.for_runs(judge.config.runs if judge else 1)
    report = select(capabilities, labels, counted_outcomes(trajectories, sources, config.count_all_failures), params)
    report.possible_benchmark_errors = failing_for_every_agent(trajectories) + benchmark_blamed(trajectories, sources)
    report.failure_sources = split(sources)
    report.inputs = [str(p) for p in inputs]
    report.params.update(
        {
            "labeller": f"judge:{judge.client.model}" if judge else "deterministic",
            "count_all_failures": config.count_all_failures,
            "trajectories": len(trajectories),
            "contrasted_tasks": len(contrasts),
        }
    )
    if judge is not None:
        report.params["judge"] = {
            "model": judge.client.model,
            "runs": judge.config.runs,
            "temperature": judge.config.temperature,
            "retries": judge.config.retries,
            "prompt": judged["labels"].prompt,
            **{
                f"{name}_{key}": getattr(result, key)
                for name, result in judged.items()
                for key in ("calls", "retried", "malformed")
            },
        }
    return Diagnosis(report, trajectories, labels, sources, contrasts, judged, proposed)
