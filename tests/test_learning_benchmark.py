"""Smoke of benchmarks/learning.py --quick on the tiny model: both families, both credits, the paired
comparisons, result.json and the curves PNG; runs trained apart with --only are reused, runs spread
over processes with --jobs give the same results, and a --warm-start size reaches those processes
(a folder holding another size is refused), and held-out scores of other seeds or another temperature
are refused."""

from __future__ import annotations

import json
import sys

import pytest
from benchmark_modules import BENCHMARKS, load_benchmark


def test_learning_benchmark_quick(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    module = load_benchmark("learning")
    with pytest.raises(SystemExit):
        module.main(
            ["--quick", "--out", str(tmp_path), "--only", "grpo:1"]
        )  # --quick trains one seed: there is no grpo:1
    assert "no such run grpo:1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        module.main(["--quick", "--out", str(tmp_path / "cold"), "--temperature", "-1"])
    assert "temperature must be >= 0" in capsys.readouterr().err and not (tmp_path / "cold").exists()
    assert module.main(["--quick", "--out", str(tmp_path), "--only", "grpo:0"]) == 0
    first_log = tmp_path / "error_recovery" / "grpo_0" / "train_log.jsonl"
    assert first_log.is_file() and not (tmp_path / "error_recovery" / "trace_0").exists()
    assert not (tmp_path / "result.json").exists(), "--only trains its runs and stops before comparing"
    trained = first_log.read_bytes()
    assert module.main(["--quick", "--out", str(tmp_path)]) == 0
    assert first_log.read_bytes() == trained, "the later run reuses the run --only trained"
    result = json.loads((tmp_path / "result.json").read_text())
    assert [f["family"] for f in result["families"]] == ["precondition_verification", "error_recovery"]
    for family in result["families"]:
        assert [(r["credit"], len(r["train_reward"]), r["rollouts"]) for r in family["runs"]] == [
            ("trace", 2, 4),
            ("grpo", 2, 4),
        ]
        comparison = family["comparison"]
        assert set(comparison["after_minus_before"]) == {"trace", "grpo"}
        held_out = family["before"]["summary"]["greedy_reward"]["n"]
        assert held_out == 3 and comparison["trace_minus_grpo"]["greedy_reward"]["n"] == held_out
        folder = tmp_path / family["family"]
        assert (folder / "warm_start" / "adapter_model.safetensors").is_file()
        assert (folder / "trace_0" / "checkpoint" / "trainer_state.pt").is_file()
        assert not (folder / "trace_0" / "checkpoint" / "adapter" / "reference").exists()
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert "trace - grpo" in capsys.readouterr().out
    with pytest.raises(
        SystemExit,
        match="holds 3 seeds, 1 samples each at temperature 1.0, not the 3 seeds, 1 samples at temperature 0.5",
    ):
        module.main(["--quick", "--out", str(tmp_path), "--families", "error_recovery", "--temperature", "0.5"])
    with pytest.raises(SystemExit, match="holds 3 seeds, 1 samples each at temperature 1.0, not the 4 seeds"):
        module.main(["--quick", "--out", str(tmp_path), "--families", "error_recovery", "--heldout", "4"])

    spread = tmp_path / "jobs"  # the same family's runs, each in a process of its own: the same results
    assert module.main(["--quick", "--out", str(spread), "--families", "error_recovery", "--jobs", "2"]) == 0
    assert sorted(p.name for p in (spread / "error_recovery").glob("job_*.log")) == ["job_0.log", "job_1.log"]
    (alone,) = json.loads((spread / "result.json").read_text())["families"]
    assert [r["after"] for r in alone["runs"]] == [r["after"] for r in result["families"][1]["runs"]]

    sized = (
        tmp_path / "sized"
    )  # --warm-start reaches the run processes: they would refuse the folder's warm start otherwise
    assert (
        module.main(
            [
                "--quick",
                "--out",
                str(sized),
                "--families",
                "error_recovery",
                "--jobs",
                "2",
                "--warm-start",
                "error_recovery=3x2",
            ]
        )
        == 0
    )
    config = json.loads((sized / "error_recovery" / "warm_start" / "warm_start.json").read_text())["config"]
    assert (config["dialogues"], config["steps"]) == (3, 2)
    with pytest.raises(SystemExit, match="holds a 3x2 warm start"):
        module.main(["--quick", "--out", str(sized), "--families", "error_recovery"])  # the default size is 2x1
    with pytest.raises(SystemExit):
        module.main(["--quick", "--warm-start", "error_recovery=3"])
    assert "DIALOGUESxSTEPS, e.g. 8x6; got '3'" in capsys.readouterr().err
    sys.modules.pop("learning_report", None)
