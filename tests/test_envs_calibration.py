"""Calibration search: a scripted policy whose success depends on the knobs lands in the band."""

from __future__ import annotations

import json

import pytest

from tracegym.synth_envs.calibration import (
    CalibrationConfig,
    Point,
    StepwiseOraclePolicy,
    backend_measure,
    calibrate,
    policy_measure,
    write_calibrations,
)
from tracegym.synth_envs.registry import get_family

SIXTEEN_BY_FOUR = CalibrationConfig(seeds=16, rollouts=4)


def test_stepwise_policy_gets_worse_on_harder_rungs() -> None:
    measure = policy_measure(StepwiseOraclePolicy(accuracy=0.85))
    ladder = get_family("multi_step_task_completion").ladder
    easy = Point.from_groups(ladder[0], 0, measure("multi_step_task_completion", ladder[0], range(20), 4))
    hard = Point.from_groups(
        ladder[-1], len(ladder) - 1, measure("multi_step_task_completion", ladder[-1], range(20), 4)
    )
    assert easy.mean_reward > hard.mean_reward + 0.15
    assert easy.success_rate > hard.success_rate


@pytest.mark.parametrize("accuracy", [0.9, 0.8, 0.7])
def test_search_lands_in_band_and_records_the_curve(accuracy: float) -> None:
    result = calibrate(
        "multi_step_task_completion", policy_measure(StepwiseOraclePolicy(accuracy)), SIXTEEN_BY_FOUR, policy="scripted"
    )
    assert result.in_band, result.as_dict()
    chosen = next(p for p in result.curve if p.knobs == result.knobs)
    assert SIXTEEN_BY_FOUR.low <= chosen.mean_reward <= SIXTEEN_BY_FOUR.high
    indices = [p.ladder_index for p in result.curve]
    assert len(indices) == len(set(indices)) and len(result.curve) <= 3  # bisection over 5 rungs
    for point in result.curve:
        assert point.seeds == 16 and point.rollouts == 4 and 0 <= point.all_zero_groups <= 1


def test_better_policy_is_given_harder_knobs() -> None:
    strong = calibrate("multi_step_task_completion", policy_measure(StepwiseOraclePolicy(0.95)), SIXTEEN_BY_FOUR)
    weak = calibrate("multi_step_task_completion", policy_measure(StepwiseOraclePolicy(0.7)), SIXTEEN_BY_FOUR)
    assert strong.knobs["n_operations"] > weak.knobs["n_operations"]


def test_out_of_reach_band_reports_closest_rung(tmp_path) -> None:
    perfect = calibrate(
        "precondition_verification", policy_measure(StepwiseOraclePolicy(1.0)), CalibrationConfig(seeds=8, rollouts=2)
    )
    assert not perfect.in_band and not perfect.accepted
    assert all(p.mean_reward == 1.0 and p.all_one_groups == 1.0 for p in perfect.curve)
    assert perfect.knobs == dict(get_family("precondition_verification").ladder[-1])
    write_calibrations([perfect], tmp_path / "calibration.json")
    data = json.loads((tmp_path / "calibration.json").read_text())
    entry = data["families"][0]
    assert entry["family"] == "precondition_verification" and entry["in_band"] is False
    assert [p["ladder_index"] for p in entry["curve"]] == sorted(p["ladder_index"] for p in entry["curve"])


def test_group_statistics() -> None:
    point = Point.from_groups({}, 0, [[0.0, 0.0], [1.0, 1.0], [0.5, 1.0], [0.0, 0.25]])
    assert point.mean_reward == pytest.approx(0.46875, abs=1e-4)
    assert point.success_rate == 0.375 and point.all_zero_groups == 0.25 and point.all_one_groups == 0.25
    assert not point.accepted(CalibrationConfig())


def test_backend_measure_runs_real_rollouts_with_the_tiny_model() -> None:
    from tracegym.config import RolloutConfig
    from tracegym.generation import HFBackend
    from tracegym.models import tiny_model

    model, tokenizer = tiny_model()
    measure = backend_measure(HFBackend(model, tokenizer), RolloutConfig(max_new_tokens=8), progress=False)
    groups = measure("precondition_verification", {"max_conditions": 1}, [0, 1], 2)
    assert len(groups) == 2 and all(len(g) == 2 for g in groups)
    assert all(0.0 <= r <= 1.0 for g in groups for r in g)


@pytest.mark.parametrize("easiest", [[[1.0, 0.0]], [[1.0, 1.0], [1.0, 0.0]]], ids=["in band", "above band, mixed"])
def test_a_rung_in_band_by_partial_credit_alone_is_passed_for_an_easier_one_solved_sometimes(easiest) -> None:
    ladder = get_family("error_recovery").ladder

    def measure(family, knobs, seeds, rollouts):  # harder rungs: 0.25 each episode, never solved
        return [easiest[seed % len(easiest)] if knobs == ladder[0] else [0.25, 0.25] for seed in seeds]

    result = calibrate("error_recovery", measure, CalibrationConfig(seeds=4, rollouts=2))
    assert result.knobs == ladder[0] and result.in_band == (easiest == [[1.0, 0.0]])
    middle = next(p for p in result.curve if p.ladder_index == (len(ladder) - 1) // 2)
    assert middle.in_band(result.config) and not middle.trainable(result.config)
