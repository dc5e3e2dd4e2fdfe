"""The planted-gap figures read from a run directory: selection against the planted capability and
the paired differences split by the gap's kinds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracegym.eval.gap_figures import gap_figures, gap_kinds
from tracegym.eval.pipeline import format_gap
from tracegym.eval.target.kinds import KINDS

SEEDS = list(range(1_000_000, 1_000_014))  # two of each kind
KIND_OF = [KINDS[i % len(KINDS)] for i in range(len(SEEDS))]


def _arm(root: Path, name: str, success: list[float]) -> None:
    folder = root / "eval" / name
    folder.mkdir(parents=True)
    per_seed = {"seeds": SEEDS, "success": success, "reward": success, "kinds": KIND_OF}
    metrics = {"success": {"mean": sum(success) / len(success)}, "per_seed": per_seed, "rollouts": 8}
    (folder / "metrics.json").write_text(json.dumps(metrics))


def _run(root: Path, selected: list[str], arms: dict[str, list[float]]) -> Path:
    (root / "analysis").mkdir(parents=True)
    (root / "analysis" / "capabilities.json").write_text(json.dumps({"selected": selected}))
    for name, success in arms.items():
        _arm(root, name, success)
    return root


def test_gap_kinds_follow_the_task_table() -> None:
    assert gap_kinds("multi_step_task_completion") == ["cancel_trip"]
    assert gap_kinds("policy_compliance") == ["billing_dispute", "policy_exception"]


def test_figures_split_the_differences_by_the_gap_kinds(tmp_path: Path) -> None:
    gap = "policy_compliance"
    in_gap = [kind in gap_kinds(gap) for kind in KIND_OF]
    base = [0.0 if g else 1.0 for g in in_gap]  # fails exactly the gap's kinds
    nogap = [1.0] * len(SEEDS)
    mixture = [1.0] * len(SEEDS)  # closes the gap
    root = _run(tmp_path, [gap, "tool_calling_precision"], {"base": base, "base_nogap": nogap, "mixture": mixture})
    figures = gap_figures(root, gap)
    assert figures["recall"] == 1.0 and figures["precision"] == 0.5
    assert figures["heldout_tasks"] == len(SEEDS)
    assert figures["nogap_minus_base"]["gap_kinds"]["mean"] == 1.0
    assert figures["nogap_minus_base"]["other_kinds"]["mean"] == 0.0
    assert figures["mixture_minus_base"]["mean"] == pytest.approx(sum(in_gap) / len(SEEDS))
    assert figures["mixture_minus_plain_grpo"] is None  # plain GRPO was not evaluated
    lines = "\n".join(format_gap(figures))
    assert "planted gap: policy_compliance" in lines and "recall 1, precision 0.50" in lines


def test_a_missed_gap_has_recall_zero(tmp_path: Path) -> None:
    root = _run(tmp_path, [], {"base": [0.0] * len(SEEDS)})
    figures = gap_figures(root, "structured_data_reasoning")
    assert figures["recall"] == 0.0 and figures["precision"] is None
    assert figures["nogap_minus_base"]["gap_kinds"] is None


def test_arms_on_different_tasks_are_refused(tmp_path: Path) -> None:
    root = _run(tmp_path, [], {"base": [0.0] * len(SEEDS), "mixture": [1.0] * len(SEEDS)})
    metrics_path = root / "eval" / "mixture" / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    metrics["per_seed"]["seeds"] = [seed + 1 for seed in SEEDS]
    metrics_path.write_text(json.dumps(metrics))
    with pytest.raises(ValueError, match="different held-out tasks"):
        gap_figures(root, "policy_compliance")
