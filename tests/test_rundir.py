import json

import pytest

from tracegym.eval.rundir import RunDirectory


def _writer(calls: list[str], name: str = "out.txt", text: str = "hello"):
    def work(stage_dir):
        calls.append(stage_dir.name)
        path = stage_dir / name
        path.write_text(text)
        return [path]

    return work


def test_complete_stage_is_skipped_on_rerun(tmp_path):
    calls: list[str] = []
    run = RunDirectory(tmp_path, {"model": "m"})
    assert run.run_stage("analysis", _writer(calls))
    again = RunDirectory(tmp_path, {"model": "m"})
    assert not again.run_stage("analysis", _writer(calls))
    assert calls == ["analysis"]
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert list(manifest["stages"]["analysis"]["artifacts"]) == ["analysis/out.txt"]
    assert "torch" in manifest["versions"]


def test_changed_or_missing_artifact_reruns_the_stage(tmp_path):
    calls: list[str] = []
    run = RunDirectory(tmp_path, {})
    run.run_stage("envs", _writer(calls))
    (tmp_path / "envs" / "out.txt").write_text("tampered")
    assert run.run_stage("envs", _writer(calls))
    (tmp_path / "envs" / "out.txt").unlink()
    assert run.run_stage("envs", _writer(calls))
    assert calls == ["envs", "envs", "envs"]


def test_interrupted_stage_is_not_complete(tmp_path):
    run = RunDirectory(tmp_path, {})

    def crash(stage_dir):
        (stage_dir / "half.txt").write_text("partial")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        run.run_stage("adapters", crash)
    resumed = RunDirectory(tmp_path, {})
    assert not resumed.is_complete("adapters")
    assert (tmp_path / "adapters" / "half.txt").exists(), "an interrupted stage keeps its folder to resume from"


def test_other_config_is_refused(tmp_path):
    RunDirectory(tmp_path, {"steps": 2})
    with pytest.raises(ValueError, match="another config"):
        RunDirectory(tmp_path, {"steps": 3})


def test_relative_run_directory_accepts_absolute_artifact_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = RunDirectory("runs/demo", {})

    def work(stage_dir):
        path = (stage_dir / "adapter.bin").resolve()
        path.write_text("weights")
        return [path]

    assert run.run_stage("adapters/x", work)
    assert RunDirectory("runs/demo", {}).is_complete("adapters/x")
