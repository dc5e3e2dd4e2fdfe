"""The diagnosis recovers capability gaps planted on the hotel desk (model-free, seconds).

For every capability a gap can be planted in, the scripted gapped agent (`eval.target.planted`: the
oracle, except that 80% of the episodes of the gap's kinds play that capability's characteristic
mistake) runs the 70 train tasks twice; `diagnose` labels the runs with the hotel's rules, found
through the `tracegym.domains` entry point as a user's installed domain would be, and must select
the planted capability and nothing else (recall 1, precision 1). With no gap, nothing fails and
nothing is selected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracegym.analysis.detect_tau import CAPABILITIES
from tracegym.analysis.diagnose import Diagnosis, diagnose
from tracegym.analysis.rules import domain_for, registry
from tracegym.cli import main
from tracegym.eval.target import TargetConfig
from tracegym.eval.target.kinds import GAP_CAPABILITIES
from tracegym.eval.target.planted import planted_runs, write_planted_runs
from tracegym.schema import LabelValue, read_jsonl

CONFIG = TargetConfig()  # the default train split: 70 tasks
TRIALS, SLIP_RATE = 2, 0.8


def planted(folder: Path, gap: str) -> tuple[Path, Diagnosis]:
    """The gapped agent's runs written into `folder` (Results file, trajectories.jsonl) and their diagnosis."""
    records = planted_runs(CONFIG, gap, trials=TRIALS, slip_rate=SLIP_RATE, seed=0)
    results, trajectories = write_planted_runs(records, folder, CONFIG, gap)
    return results, diagnose(list(read_jsonl(trajectories)), [trajectories])


@pytest.fixture(scope="module")
def diagnoses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Diagnosis]:
    assert registry.lookup("hotel") is not None, "no tracegym.domains entry point 'hotel': `pip install --no-deps -e .`"
    root = tmp_path_factory.mktemp("planted")
    return {gap: planted(root / (gap or "none"), gap)[1] for gap in ("", *GAP_CAPABILITIES)}


def test_every_catalogued_capability_can_be_planted() -> None:
    assert set(GAP_CAPABILITIES) == set(CAPABILITIES)


@pytest.mark.parametrize("gap", GAP_CAPABILITIES)
def test_the_planted_gap_and_only_it_is_selected(diagnoses: dict[str, Diagnosis], gap: str) -> None:
    diagnosis = diagnoses[gap]
    assert {domain_for(t).name for t in diagnosis.trajectories} == {"hotel"}
    selected = set(diagnosis.report.selected)
    recall = float(gap in selected)
    precision = len(selected & {gap}) / len(selected) if selected else 0.0
    failures = sum(not t.success for t in diagnosis.trajectories)
    print(f"planted {gap}: {failures} failures, selected {sorted(selected)}", end=": ")
    print(f"recall {recall:.2f}, precision {precision:.2f}")
    assert failures >= 10  # enough slips for selection to decide
    assert (recall, precision) == (1.0, 1.0)


@pytest.mark.parametrize("gap", GAP_CAPABILITIES)
def test_each_slip_is_labelled_with_its_capability_alone(diagnoses: dict[str, Diagnosis], gap: str) -> None:
    """Every failed run (each one a slip) is LACKING in the planted capability, with evidence, and in
    no other; every passed run (the oracle) is LACKING in nothing."""
    failed = {t.id for t in diagnoses[gap].trajectories if not t.success}
    for label in diagnoses[gap].labels:
        lacking = label.value == LabelValue.LACKING
        assert lacking == (label.trajectory_id in failed and label.capability == gap), (label.trajectory_id, label)
        assert not lacking or label.evidence


def test_with_no_gap_nothing_fails_and_nothing_is_selected(diagnoses: dict[str, Diagnosis]) -> None:
    diagnosis = diagnoses[""]
    assert all(t.success for t in diagnosis.trajectories) and len(diagnosis.trajectories) == 70 * TRIALS
    assert diagnosis.report.selected == []
    assert not any(label.value == LabelValue.LACKING for label in diagnosis.labels)


def test_the_report_names_the_broken_rules_with_quotes(tmp_path: Path) -> None:
    results, _ = planted(tmp_path / "runs", "precondition_verification")
    assert main(["diagnose", str(results), "--out", str(tmp_path / "diagnosis")]) == 0
    report = (tmp_path / "diagnosis" / "report.md").read_text(encoding="utf-8")
    assert "- `hotel`, 140 runs: the domain's rules" in report and "entry point hotel" in report
    explained = report.split("## Failed tasks explained by each selected capability")[1]
    assert "### precondition_verification" in explained
    assert "the policy: “C1 A confirmed flexible reservation checking in at least 2 days after today" in explained
