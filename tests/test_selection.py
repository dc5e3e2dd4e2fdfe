"""Selection math (papers/TRACE.md §1) on hand-made label tables."""

from __future__ import annotations

import pytest

from tracegym.analysis.selection import Outcome, SelectionConfig, bootstrap_delta, majority, run_stats, select
from tracegym.schema import Capability, Label, LabelValue

P, L, N = LabelValue.PRESENT, LabelValue.LACKING, LabelValue.NA
CAP = Capability(name="c", description="a capability")


def labels_for(table: dict[str, LabelValue], run: int = 0, capability: str = "c") -> list[Label]:
    return [Label(trajectory_id=t, capability=capability, value=v, labeller="hand", run=run) for t, v in table.items()]


def test_formulas_on_a_hand_table() -> None:
    # failures f1..f4: L, L, P, NA; successes s1..s4: L, P, P, P
    outcomes = {
        **{f"f{i}": Outcome(f"t{i}", False) for i in range(1, 5)},
        **{f"s{i}": Outcome(f"t{i}", True) for i in range(1, 5)},
    }
    table = {"f1": L, "f2": L, "f3": P, "f4": N, "s1": L, "s2": P, "s3": P, "s4": P}
    report = select([CAP], labels_for(table), outcomes, SelectionConfig(k=1, n=1, bootstrap=200))
    stats = report.capabilities[0]
    assert stats.cov == [pytest.approx(2 / 4)]
    assert stats.er_minus == [pytest.approx(2 / 3)]
    assert stats.er_plus == [pytest.approx(1 / 4)]
    assert stats.delta == [pytest.approx(2 / 3 - 1 / 4)]
    assert stats.selected and report.selected == ["c"]
    assert report.union_coverage == pytest.approx(2 / 4)
    # paired: t1 (L vs L) 0, t2 (L vs P) 1, t3 (P vs P) 0; t4 failure is NA -> not paired
    assert stats.paired_delta == pytest.approx(1 / 3) and stats.paired_tasks == 3
    assert [e["trajectory_id"] for e in stats.explained_failures] == ["f1", "f2"]


def test_empty_denominators_are_none() -> None:
    assert run_stats([0, 0, 0, 0], 0) == (None, None, None, None)
    outcomes = {"f1": Outcome("t1", False), "f2": Outcome("t2", False)}
    report = select([CAP], labels_for({"f1": L, "f2": N}), outcomes, SelectionConfig(k=1, n=1, bootstrap=50))
    stats = report.capabilities[0]
    assert stats.cov == [0.5] and stats.er_minus == [1.0]
    assert stats.er_plus == [None] and stats.delta == [None]  # no successes at all
    assert not stats.selected and stats.delta_ci is None and stats.paired_delta is None
    only_successes = select([CAP], labels_for({"s1": P}), {"s1": Outcome("t1", True)}, SelectionConfig(k=1, n=1))
    assert only_successes.capabilities[0].cov == [None] and only_successes.union_coverage is None


def _runs(passing: int, total: int) -> list[Label]:
    """`total` runs; the first `passing` give Δ = 1 and Cov = 1, the rest label everything PRESENT."""
    labels = []
    for run in range(total):
        failure = L if run < passing else P
        labels += labels_for({"f1": failure, "f2": failure, "s1": P, "s2": P}, run=run)
    return labels


@pytest.mark.parametrize(("passing", "selected"), [(8, True), (10, True), (7, False), (0, False)])
def test_k_of_n_rule(passing: int, selected: bool) -> None:
    outcomes = {
        "f1": Outcome("t1", False),
        "f2": Outcome("t2", False),
        "s1": Outcome("t1", True),
        "s2": Outcome("t2", True),
    }
    report = select([CAP], _runs(passing, 10), outcomes, SelectionConfig(k=8, n=10, bootstrap=100))
    stats = report.capabilities[0]
    assert stats.runs_passed == passing
    assert stats.selected is selected
    assert stats.delta_mean == pytest.approx(passing / 10)


def test_missing_runs_count_as_not_passing() -> None:
    outcomes = {"f1": Outcome("t1", False), "s1": Outcome("t1", True)}
    labels = [label for label in _runs(10, 10) if label.run < 7 and label.trajectory_id in outcomes]
    report = select([CAP], labels, outcomes, SelectionConfig(k=8, n=10, bootstrap=50))
    assert report.capabilities[0].runs_passed == 7 and not report.capabilities[0].selected


def test_thresholds_are_inclusive_and_both_needed() -> None:
    # Cov = 1/10 exactly and Δ = 1: selected at ρ = 0.10; at ρ = 0.11 it is not.
    outcomes = {f"f{i}": Outcome(f"t{i}", False) for i in range(10)} | {"s": Outcome("t0", True)}
    table = {"f0": L} | {f"f{i}": N for i in range(1, 10)} | {"s": P}
    assert select([CAP], labels_for(table), outcomes, SelectionConfig(k=1, n=1, bootstrap=10)).selected == ["c"]
    assert select([CAP], labels_for(table), outcomes, SelectionConfig(rho=0.11, k=1, n=1, bootstrap=10)).selected == []


def test_majority_ties_lean_to_present() -> None:
    labels = (
        labels_for({"a": L}, run=0)
        + labels_for({"a": P}, run=1)
        + labels_for({"a": L}, run=2)
        + labels_for({"a": P}, run=3)
    )
    assert majority(labels)[("a", "c")].value == P
    assert majority(labels[:3])[("a", "c")].value == L


def test_bootstrap_interval_brackets_estimate_and_is_seeded() -> None:
    import numpy as np

    # 20 tasks, per task one failure and one success; failures lacking on even tasks only.
    counts = np.zeros((1, 20, 4))
    counts[0, ::2, 0] = 1  # lacking failed
    counts[0, 1::2, 1] = 1  # present failed
    counts[0, :, 3] = 1  # present passed
    failures = np.ones(20)
    low, high = bootstrap_delta(counts, failures, 2000, seed=3)
    assert low < 0.5 < high and 0.2 < low and high < 0.8
    assert bootstrap_delta(counts, failures, 2000, seed=3) == (low, high)
    constant = np.zeros((1, 5, 4))
    constant[0, :, 0] = 1
    constant[0, :, 3] = 1
    assert bootstrap_delta(constant, np.ones(5), 100, seed=0) == (1.0, 1.0)
