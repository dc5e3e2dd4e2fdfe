"""`tracegym run PATH...` on given runs: stages in order into one run directory, skipped when
complete, resumed otherwise (the loop on the target: tests/test_loop.py)."""

import json

import pytest

from tracegym.adapters.config import EvalConfig, TurnGRPOConfig, WarmStartConfig
from tracegym.analysis.examples import write_example_run
from tracegym.cli import main
from tracegym.config import RolloutConfig
from tracegym.eval.config import RunConfig
from tracegym.eval.pipeline import format_summary, run_pipeline
from tracegym.synth_envs.calibration import CalibrationConfig


def example_inputs(tmp_path) -> list[str]:
    return [str(write_example_run(tmp_path / "inputs"))]


def test_run_without_training_writes_every_stage_and_skips_them_on_rerun(tmp_path, capsys):
    config = RunConfig(model="tiny", max_adapters=0, inputs=example_inputs(tmp_path))
    tmp_path = tmp_path / "run"
    summary = run_pipeline(tmp_path, config)
    assert summary["selected"], "the example run has capabilities to select"
    assert [row["capability"] for row in summary["adapters"]] == summary["selected"]
    assert "Δ 95% CI" in capsys.readouterr().out, "the analysis stage prints the selection table"
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert list(manifest["stages"]) == ["trajectories", "analysis", "envs"]
    assert all(stage["status"] == "complete" for stage in manifest["stages"].values())
    mtime = (tmp_path / "analysis" / "capabilities.json").stat().st_mtime_ns
    run_pipeline(tmp_path, config)
    assert (tmp_path / "analysis" / "capabilities.json").stat().st_mtime_ns == mtime, "complete stage rerun"


def test_cli_refuses_a_run_directory_made_with_another_config(tmp_path, capsys):
    inputs = example_inputs(tmp_path)
    run_pipeline(tmp_path / "run", RunConfig(model="tiny", max_adapters=0, inputs=inputs))
    assert (
        main(
            [
                "run",
                *inputs,
                "--out",
                str(tmp_path / "run"),
                "--model",
                "tiny",
                "--max-adapters",
                "0",
                "--grpo-seed",
                "1",
            ]
        )
        == 1
    )
    assert "another config" in capsys.readouterr().err


def test_cli_names_a_missing_input(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.json"), "--out", str(tmp_path / "run")]) == 1
    assert "nope.json: no such file" in capsys.readouterr().err


@pytest.mark.slow
def test_tiny_end_to_end_trains_one_adapter_and_resumes_nothing(tmp_path):
    config = RunConfig(
        model="tiny",
        max_adapters=1,
        warm_start=WarmStartConfig(enabled=True, dialogues=16, steps=1, batch_size=2),
        grpo=TurnGRPOConfig(steps=1, groups_per_step=1, group_size=2, micro_batch_size=1),
        eval=EvalConfig(seeds=2),
        calibration=CalibrationConfig(enabled=True, seeds=1, rollouts=2),
        rollout=RolloutConfig(max_new_tokens=16),
        inputs=example_inputs(tmp_path),
    )
    tmp_path = tmp_path / "run"
    summary = run_pipeline(tmp_path, config)
    trained = [row for row in summary["adapters"] if row["adapter"]]
    stage = tmp_path / "adapters" / trained[0]["capability"]
    assert len(trained) == 1 and (stage / "adapter_model.safetensors").is_file()
    assert json.loads((stage / "calibration.json").read_text())["families"][0]["curve"], "calibrated after warm start"
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["resolved"]["turn_budget_tokens"][trained[0]["capability"]]["tokens"] == 16
    seconds = manifest["stages"][f"adapters/{trained[0]['capability']}"]["seconds"]
    run_pipeline(tmp_path, config)
    again = json.loads((tmp_path / "run.json").read_text())
    assert again["stages"][f"adapters/{trained[0]['capability']}"]["seconds"] == seconds, "complete adapter retrained"


def test_the_closing_table_gives_the_change_and_names_the_environment_and_its_curve():
    change = {"before": 0.469, "after": 0.875, "difference": {"mean": 0.406, "low": 0.25, "high": 0.5625}}
    summary = {
        "run_dir": "r",
        "model": "m",
        "selected": [],
        "adapters": [
            {
                "capability": "error_recovery",
                "family": "error_recovery",
                "adapter": "/r/adapters/error_recovery",
                "knobs": {"n_packages": 1, "n_error_kinds": 1},
                "calibrated": True,
                "heldout": {"sampled_reward": change},
            },
            {
                "capability": "policy_compliance",
                "family": "precondition_verification",
                "adapter": None,
                "knobs": {},
                "calibrated": False,
                "heldout": {},
            },
        ],
    }
    text = format_summary(summary)
    assert "0.469   0.875  +0.406 [+0.250, +0.562]" in text
    assert "error_recovery: trained on error_recovery at n_packages=1, n_error_kinds=1 (calibrated)" in text
    assert "/r/adapters/error_recovery/learning_curve.png" in text and "policy_compliance: trained" not in text


def test_stop_after_ends_the_run_there_and_a_later_run_carries_on(tmp_path):
    config = RunConfig(model="tiny", max_adapters=0, inputs=example_inputs(tmp_path))
    run = tmp_path / "run"
    summary = run_pipeline(run, config, stop_after="trajectories")
    assert summary["selected"] is None and "stopped after trajectories" in format_summary(summary)
    assert list(json.loads((run / "run.json").read_text())["stages"]) == ["trajectories"]
    summary = run_pipeline(run, config, stop_after="analysis")
    assert summary["selected"], "the example run has capabilities to select"
    assert f"selected capabilities: {', '.join(summary['selected'])}" in format_summary(summary)
    assert list(json.loads((run / "run.json").read_text())["stages"]) == ["trajectories", "analysis"]
    run_pipeline(run, config)
    assert list(json.loads((run / "run.json").read_text())["stages"]) == ["trajectories", "analysis", "envs"]
    with pytest.raises(ValueError, match="stop_after"):
        run_pipeline(run, config, stop_after="envs")


def test_stop_after_shows_only_a_complete_analysis_and_keeps_a_finished_runs_summary(tmp_path):
    config = RunConfig(model="tiny", max_adapters=0, inputs=example_inputs(tmp_path))
    run = tmp_path / "run"
    finished = run_pipeline(run, config)
    written = (run / "summary.json").read_text()
    # a finished run stopped again: its selection (the analysis is complete), its summary.json kept
    summary = run_pipeline(run, config, stop_after="trajectories")
    assert summary["selected"] == finished["selected"] and (run / "summary.json").read_text() == written
    # an analysis no longer complete (its report changed since): no selection shown from it
    report = run / "analysis" / "capabilities.json"
    report.write_text(report.read_text() + "\n")
    summary = run_pipeline(run, config, stop_after="trajectories")
    assert summary["selected"] is None and "stopped_after" not in json.loads((run / "summary.json").read_text())
    # a run that has not gone past the stop points has its summary.json written
    fresh = tmp_path / "fresh"
    run_pipeline(fresh, config, stop_after="analysis")
    fresh_manifest = json.loads((fresh / "run.json").read_text())
    fresh_manifest["stages"]["analysis"]["status"] = "running"
    (fresh / "run.json").write_text(json.dumps(fresh_manifest))
    summary = run_pipeline(fresh, config, stop_after="trajectories")
    assert summary["selected"] is None
    assert json.loads((fresh / "summary.json").read_text())["stopped_after"] == "trajectories"
