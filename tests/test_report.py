"""report.md and the plot: whole evidence, what reading the inputs repaired and skipped, failures not
caused by the agent grouped by reason, and plot labels that do not overlap."""

from __future__ import annotations

import matplotlib.pyplot as plt

from tracegym.analysis.attribution import FailureSource
from tracegym.analysis.diagnose import Diagnosis
from tracegym.analysis.ingest import Inconsistency, IngestResult, SkippedRecord, SourceSummary
from tracegym.analysis.report import _separate, coverage_delta_figure, render_markdown, text_box
from tracegym.schema import Capability, CapabilityReport, CapabilityStats, Source, Trajectory

LONG = "wrong value read from the data: " + "x" * 300 + " (gold wants 'ABC123')"


def stats(name: str, cov: float, delta: float, selected: bool = True) -> CapabilityStats:
    explained = [
        {"trajectory_id": "r/1", "task_id": "tau2-airline:1", "evidence": [{"message_index": 7, "quote": LONG}]}
    ]
    return CapabilityStats(
        capability=Capability(name=name, description="d"),
        cov=[cov],
        er_minus=[cov],
        er_plus=[0.0],
        delta=[delta],
        runs_passed=int(selected),
        selected=selected,
        delta_mean=delta,
        delta_ci=(delta - 0.1, delta + 0.1),
        explained_failures=explained if selected else [],
    )


def report(names: list[str]) -> CapabilityReport:
    return CapabilityReport(
        capabilities=[stats(n, 0.4, 0.3) for n in names],
        selected=names,
        failure_sources={"agent": 1, "user_simulator": 1, "benchmark": 2},
        params={"rho": 0.1, "delta": 0.2, "k": 1, "n": 1},
    )


def test_labels_of_coinciding_points_do_not_overlap() -> None:
    figure = coverage_delta_figure(report(["precondition_verification", "policy_compliance", "tool_calling_precision"]))
    renderer = figure.canvas.get_renderer()
    boxes = [text_box(a, renderer) for a in figure.axes[0].texts]
    assert len(boxes) == 3 and not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    plt.close(figure)
    planted, axes = plt.subplots()
    labels = [axes.annotate(n, (0.5, 0.5), textcoords="offset points", xytext=(6, 4)) for n in ("aaaa", "bbbb")]
    renderer = planted.canvas.get_renderer()
    assert text_box(labels[0], renderer).overlaps(text_box(labels[1], renderer))  # what _separate must undo
    _separate(planted, labels)
    assert not text_box(labels[0], renderer).overlaps(text_box(labels[1], renderer))
    plt.close(planted)


def test_markdown_keeps_evidence_whole_and_lists_repairs_skips_and_grouped_sources() -> None:
    trajectory = Trajectory(
        id="r/1", task_id="1", source=Source(benchmark="tau2-airline", format="tau2_results", file="f")
    )
    sources = {
        f"r/{i}": FailureSource(trajectory_id=f"r/{i}", source=s, reason=r, method="deterministic")
        for i, (s, r) in enumerate(
            [
                ("benchmark", "gold action breaks the policy"),
                ("benchmark", "gold action breaks the policy"),
                ("user_simulator", "the user simulator stopped before the agent could act"),
                ("agent", "no other cause established"),
            ],
            start=2,
        )
    }
    ingest = IngestResult(
        sources=[SourceSummary(path="runs/a.json", format="tau2_results", runs=4, repaired=1, skipped=1)],
        skipped=[SkippedRecord("runs/a.json", "simulations[3]", "messages[2].role should be one of ...")],
        inconsistencies=[
            Inconsistency("runs/a.json", ["simulations[1]", "tasks[9]"], "task_id set to '9'", True),
            Inconsistency("runs/a.json", ["simulations[2]"], "no task matches them, label kept"),
        ],
    )
    diagnosis = Diagnosis(report(["tool_calling_precision"]), [trajectory], [], sources, [], ingest=ingest)
    markdown = render_markdown(diagnosis)
    assert LONG in markdown and "[msg 7]" in markdown
    assert "Repairs made while reading (1)" in markdown and "task_id set to '9'" in markdown
    assert "Inconsistencies kept as recorded (1)" in markdown and "Skipped records (1)" in markdown
    assert "simulations[3]: messages[2].role" in markdown
    assert "### benchmark: gold action breaks the policy (2)" in markdown
    assert "### user_simulator: the user simulator stopped before the agent could act (1)" in markdown
    assert "no other cause established" not in markdown
    assert "not recorded" in render_markdown(Diagnosis(report([]), [trajectory], [], {}, []))
