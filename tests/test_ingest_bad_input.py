"""Bad input: truncated JSON, wrong schema, unknown format, missing report file.

Each gives one message naming the file and the record / JSON path, fails by default (IngestError,
CLI exit 1, previous output untouched) and, with keep-going, the rest is ingested and the skipped
record listed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ingest_samples import mini_swe_run, write_json

from tracegym.analysis.examples import example_results, write_example_run
from tracegym.analysis.ingest import IngestError, ingest_paths
from tracegym.analysis.ingest.outputs import REPORT, TRAJECTORIES
from tracegym.cli import main


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return write_example_run(tmp_path / "good")


def _truncated(tmp_path: Path) -> tuple[Path, str]:
    """Cut off right where the first simulation's reward_info should start."""
    text = json.dumps(example_results(), indent=1)
    cut = text.index('"reward_info": ', text.index('"simulations"')) + len('"reward_info": ')
    path = tmp_path / "bad" / "truncated.json"
    path.parent.mkdir(parents=True)
    path.write_text(text[:cut], encoding="utf-8")
    return path, "simulations[0].reward_info"


def _wrong_schema(tmp_path: Path) -> tuple[Path, str]:
    document = example_results()
    document["simulations"][2]["messages"][1]["role"] = 42
    return write_json(tmp_path / "bad" / "wrong_schema.json", document), "simulations[2].messages[1].role"


def _unknown(tmp_path: Path) -> tuple[Path, str]:
    return write_json(tmp_path / "bad" / "unknown.json", {"rows": [1, 2, 3]}), ""


def _missing_report(tmp_path: Path) -> tuple[Path, str]:
    run = mini_swe_run(tmp_path / "bad" / "run", ["repo__a-1", "repo__a-2"], with_report={"repo__a-1"})
    return run, "instance_id"


CASES = {
    "truncated JSON": (_truncated, "truncated JSON", "truncated.json", 0),
    "wrong schema": (_wrong_schema, "role should be one of", "wrong_schema.json", 3),
    "unknown format": (_unknown, "unknown format", "unknown.json", 0),
    "missing report": (_missing_report, "missing report file", "repo__a-2.traj.json", 1),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_fails_by_default_naming_file_and_path(case: str, tmp_path: Path, good: Path) -> None:
    make, reason, file_name, _ = CASES[case]
    bad, json_path = make(tmp_path)
    with pytest.raises(IngestError) as caught:
        ingest_paths([good, bad])
    error = caught.value
    assert Path(error.path).name == file_name and file_name in str(error)
    assert reason in str(error)
    assert error.json_path == json_path
    assert error.json_path in str(error)


@pytest.mark.parametrize("case", CASES)
def test_keep_going_ingests_the_rest_and_lists_the_skipped(case: str, tmp_path: Path, good: Path) -> None:
    make, reason, file_name, kept_from_bad = CASES[case]
    bad, json_path = make(tmp_path)
    result = ingest_paths([good, bad], keep_going=True)
    assert len(result.trajectories) == 4 + kept_from_bad
    assert len(result.skipped) == 1
    skipped = result.skipped[0]
    assert Path(skipped.path).name == file_name and reason in skipped.reason
    assert skipped.json_path == json_path
    assert sum(s.skipped for s in result.sources) == 1


@pytest.mark.parametrize("case", CASES)
def test_cli_exits_nonzero_and_keeps_previous_output(
    case: str, tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, reason, file_name, kept_from_bad = CASES[case]
    bad, _ = make(tmp_path)
    out = tmp_path / "out"
    assert main(["ingest", str(good), "--out", str(out)]) == 0
    before = (out / TRAJECTORIES).read_bytes()
    capsys.readouterr()
    assert main(["ingest", str(good), str(bad), "--out", str(out)]) == 1
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1 and file_name in message and reason in message
    assert (out / TRAJECTORIES).read_bytes() == before
    assert main(["ingest", str(good), str(bad), "--out", str(out), "--keep-going"]) == 0
    printed = capsys.readouterr().out
    assert "skipped records (1):" in printed and file_name in printed
    report = json.loads((out / REPORT).read_text())
    assert report["trajectories"] == 4 + kept_from_bad and len(report["skipped"]) == 1


def test_unknown_file_met_while_walking_is_ignored_not_fatal(tmp_path: Path, good: Path) -> None:
    _unknown(tmp_path)
    result = ingest_paths([good.parent, tmp_path / "bad"])
    assert len(result.trajectories) == 4
    assert [Path(i.path).name for i in result.ignored] == ["unknown.json"]


def test_openhands_folder_without_summary_is_a_missing_report(tmp_path: Path, good: Path) -> None:
    run = tmp_path / "oh_run"
    write_json(
        run / "llm_completions" / "repo__b-1" / "litellm-1.0.json", {"messages": [], "response": {}, "kwargs": {}}
    )
    with pytest.raises(IngestError, match="missing report file .*output.swebench_eval.md"):
        ingest_paths([run])
    result = ingest_paths([good, run], keep_going=True)
    assert len(result.trajectories) == 4 and result.skipped[0].path == str(run)


def test_missing_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="nowhere.json: no such file"):
        ingest_paths([tmp_path / "nowhere.json"])
