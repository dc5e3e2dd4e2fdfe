"""benchmarks/planted_gap.py shares the no-gap stages between gaps of one config, and only then."""

from __future__ import annotations

import json

from benchmark_modules import load_benchmark

from tracegym.config import config_dict
from tracegym.eval.config import RunConfig
from tracegym.eval.rundir import RunDirectory


def _gap_run(root, gap: str, **changes) -> RunDirectory:
    config = config_dict(RunConfig())
    config["base_agent"] = {**config["base_agent"], "gap": gap}
    config["target"] = {**config["target"], **changes}
    return RunDirectory(root / gap, config, defaults=config_dict(RunConfig()))


def _finish(run: RunDirectory, stage: str, text: str) -> None:
    def work(folder):
        (folder / "done.txt").write_text(text)
        return [folder / "done.txt"]

    run.run_stage(stage, work)


def test_the_no_gap_stages_come_from_a_gap_of_the_same_config_only(tmp_path, capsys):
    module = load_benchmark("planted_gap")
    donor = _gap_run(tmp_path, "precondition_verification")
    _finish(donor, "base_agent_nogap", "agent")
    _finish(donor, "eval/base_nogap", "episodes")
    other_config = _gap_run(tmp_path, "policy_compliance", heldout_tasks=14)
    _finish(other_config, "base_agent_nogap", "another agent")
    _gap_run(tmp_path, "structured_data_reasoning")
    others = [tmp_path / "policy_compliance", tmp_path / "precondition_verification"]
    module.share_nogap(tmp_path / "structured_data_reasoning", others)
    stages = json.loads((tmp_path / "structured_data_reasoning" / "run.json").read_text())["stages"]
    assert set(stages) == {"base_agent_nogap", "eval/base_nogap"}
    assert (tmp_path / "structured_data_reasoning" / "base_agent_nogap" / "done.txt").read_text() == "agent"
    assert "base_agent_nogap, eval/base_nogap taken from" in capsys.readouterr().out
