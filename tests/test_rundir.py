import json

import pytest

from tracegym.eval.rundir import RunDirectory, RunDirectoryError, config_differences


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
    with pytest.raises(RunDirectoryError, match="another config"):
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


def test_changed_input_content_reruns_every_stage_and_says_so(tmp_path, caplog):
    data = tmp_path / "runs"
    data.mkdir()
    (data / "a.json").write_text("one")
    calls: list[str] = []
    run = RunDirectory(tmp_path / "run", {"model": "m"}, [data])
    run.run_stage("trajectories", _writer(calls))
    run.run_stage("analysis", _writer(calls))
    (tmp_path / "run" / "analysis" / "stale_checkpoint").write_text("from the old inputs")
    assert RunDirectory(tmp_path / "run", {"model": "m"}, [data]).is_complete("analysis"), "same content: kept"
    (data / "a.json").write_text("two")  # same path, other content
    with caplog.at_level("WARNING"):
        again = RunDirectory(tmp_path / "run", {"model": "m"}, [data])
    assert "input changed" in caplog.text and str(data) in caplog.text
    assert not again.is_complete("trajectories") and not again.is_complete("analysis")
    assert not (tmp_path / "run" / "analysis" / "stale_checkpoint").exists(), "nothing made from old inputs is resumed"
    assert again.run_stage("trajectories", _writer(calls)) and calls == ["trajectories", "analysis", "trajectories"]
    (data / "b.json").write_text("new file")
    assert not RunDirectory(tmp_path / "run", {"model": "m"}, [data]).is_complete("trajectories"), "a file added"


@pytest.mark.parametrize(
    "text", ["{not json", "[1, 2]", '{"config": {}}', "\udcff".encode("utf-8", "surrogatepass").decode("latin-1")]
)
def test_a_corrupted_manifest_is_a_one_line_error(tmp_path, text):
    (tmp_path / "run.json").write_text(text, encoding="latin-1")
    before = (tmp_path / "run.json").read_bytes()
    with pytest.raises(RunDirectoryError, match="run.json: not a") as raised:
        RunDirectory(tmp_path, {"model": "m"})
    assert "\n" not in str(raised.value) and (tmp_path / "run.json").read_bytes() == before


@pytest.mark.parametrize("model", ["/no/such/path", "EMPTY", "FILE", "no-such-org/no-such-model-xyz"])
def test_a_bad_model_is_a_one_line_error_that_leaves_no_debris(tmp_path, capsys, model, monkeypatch):
    from tracegym.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no hub here: an unknown id fails at once instead of retrying
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("not a model")
    model = {"EMPTY": str(tmp_path / "empty"), "FILE": str(tmp_path / "file")}.get(model, model)
    for command in (
        ["train", "precondition_verification", "--out", str(tmp_path / "t")],
        ["run", "--out", str(tmp_path / "r")],
        ["eval", "base", "--family", "precondition_verification"],
    ):
        assert main([*command, "--model", model]) == 1
        error = capsys.readouterr().err
        assert model in error and error.count("\n") == 1, error
    assert not (tmp_path / "t").exists() and not (tmp_path / "r").exists()


def test_a_setting_added_since_the_run_resumes_at_its_default_and_refuses_otherwise(tmp_path):
    RunDirectory(tmp_path, {"steps": 4, "grpo": {"lr": 0.1}})
    defaults = {"steps": 1, "grpo": {"lr": 0.5, "served": {"url": None}}}
    RunDirectory(tmp_path, {"steps": 4, "grpo": {"lr": 0.1, "served": {"url": None}}}, defaults=defaults)
    with pytest.raises(RunDirectoryError, match=r"grpo\.served: \(absent\) -> \{'url': 'http://x'\}"):
        RunDirectory(tmp_path, {"steps": 4, "grpo": {"lr": 0.1, "served": {"url": "http://x"}}}, defaults=defaults)
    with pytest.raises(RunDirectoryError, match=r"grpo\.lr: 0\.1 -> 0\.5; steps: 4 -> 1"):
        RunDirectory(tmp_path, {"steps": 1, "grpo": {"lr": 0.5}}, defaults=defaults)


@pytest.mark.parametrize("stored", [None, "absent", [1, 2]])
def test_a_manifest_without_a_readable_config_says_so_plainly(tmp_path, stored):
    manifest = {"stages": {}, "inputs": {}} | ({} if stored == "absent" else {"config": stored})
    (tmp_path / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(RunDirectoryError, match="the config this run was made with is (missing|not a table)") as raised:
        RunDirectory(tmp_path, {"model": "m", "grpo": {"steps": 4}})
    assert "grpo" not in str(raised.value), "not a dump of the current config"
    assert config_differences(stored, {"model": "m"}) == ["the stored config is missing or unreadable"]


def test_a_stage_complete_in_another_run_is_adopted_with_its_files_and_checked(tmp_path):
    donor = RunDirectory(tmp_path / "donor", {"model": "m"})
    donor.run_stage("base_agent_nogap", _writer([], text="agent"))
    donor.start_stage("eval/base_nogap")  # interrupted there
    run = RunDirectory(tmp_path / "run", {"model": "m"})
    assert run.adopt_stage(tmp_path / "donor", "base_agent_nogap")
    assert (tmp_path / "run" / "base_agent_nogap" / "out.txt").read_text() == "agent"
    assert not RunDirectory(tmp_path / "run", {"model": "m"}).run_stage("base_agent_nogap", _writer([]))
    assert not run.adopt_stage(tmp_path / "donor", "eval/base_nogap"), "an unfinished stage is not adopted"
    assert not run.adopt_stage(tmp_path / "nowhere", "analysis"), "no such run"
    (tmp_path / "donor" / "base_agent_nogap" / "out.txt").write_text("tampered")
    other = RunDirectory(tmp_path / "other", {"model": "m"})
    assert not other.adopt_stage(tmp_path / "donor", "base_agent_nogap"), "files that differ from the record"
    assert "base_agent_nogap" not in json.loads((tmp_path / "other" / "run.json").read_text())["stages"]
