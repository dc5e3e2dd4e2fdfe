"""benchmarks/diagnosis_agreement.py --v1: the τ-bench v1 round's reference, its halves by task and the
task-level bootstrap; labels/tau_v1_reference.json against its sample and the data file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from benchmark_modules import load_benchmark

from tracegym.analysis.detect_tau import CAPABILITIES
from tracegym.analysis.diagnose import diagnose
from tracegym.analysis.ingest import ingest_paths
from tracegym.analysis.selection import majority

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "tau_v1_small.json"  # retail: task 0 (a success, a failure), task 5 (a failure)


@pytest.fixture
def bench():
    return load_benchmark("diagnosis_agreement")


def test_a_task_bootstrap_draws_whole_tasks(bench) -> None:
    reference = ["LACKING", "PRESENT", "PRESENT", "NA", "LACKING", "PRESENT", "PRESENT", "LACKING"] * 3
    labeller = ["LACKING", "PRESENT", "LACKING", "NA", "PRESENT", "PRESENT", "PRESENT", "LACKING"] * 3
    once = list(zip(reference, labeller, strict=True))
    twice = [pair for pair in once for _ in range(2)]  # two trials of every task, labelled alike
    tasks = [f"task{n}" for n in range(len(once)) for _ in range(2)]
    by_task = bench.bootstrap_kappas([twice], resamples=300, groups=tasks)
    # drawing tasks of two identical trials is drawing the tasks once: the same κ on every resample
    assert np.allclose(by_task, bench.bootstrap_kappas([once], resamples=300), equal_nan=True)
    by_trajectory = bench.interval(bench.bootstrap_kappas([twice], resamples=300)[:, 0])
    low, high = bench.interval(by_task[:, 0])
    assert high - low > by_trajectory[1] - by_trajectory[0]  # trials counted as independent look surer
    low, high = bench.interval(bench.bootstrap_kappas([twice], groups=tasks)[:, 0])  # its default resamples
    assert bench.kappa_with_interval(twice, tasks) == f"{bench.kappa(twice):+.2f} [{low:+.2f}, {high:+.2f}]"
    with pytest.raises(ValueError):
        bench.bootstrap_kappas([twice], groups=tasks[:-1])


def _round(tmp_path: Path) -> tuple[Path, Path, Path, list[dict]]:
    """A tiny v1 round: the fixture's records and copies of them under new task ids, in a data folder;
    tasks 0 and 7 in the test half, 5 and 9 in tune. Returns (data, reference, sample, reference entries),
    the reference holding the detectors' own labels except two judgements on the test half."""
    records = json.loads(FIXTURE.read_text())
    copies = [{**records[0], "task_id": 7}, {**records[1], "task_id": 7}, {**records[2], "task_id": 9}]
    data = tmp_path / "data"
    (data / "v1").mkdir(parents=True)
    run = data / "v1" / "tiny_v1format.json"
    run.write_text(json.dumps(records + copies))
    trajectories = ingest_paths([run]).trajectories
    diagnosis = diagnose(trajectories, [])
    voted = majority(diagnosis.labels)
    halves = {"0": "test", "7": "test", "5": "tune", "9": "tune"}
    sample, reference = [], []
    for index, trajectory in enumerate(trajectories):
        head = {"file": "v1/tiny_v1format.json", "index": index, "task_id": trajectory.task_id}
        sample.append(
            {**head, "trial": trajectory.trial, "reward": trajectory.reward, "half": halves[trajectory.task_id]}
        )
        labels = {
            name: {"label": voted[(trajectory.id, name)].value.value, "msg_idx": None, "quote": None, "reason": "r"}
            for name in CAPABILITIES
        }
        source = None if trajectory.success else diagnosis.sources[trajectory.id].source
        reference.append(
            {"entry": index, **head, "trial": trajectory.trial, "reward": trajectory.reward, "labels": labels}
            | {"primary_lacking": None, "benchmark_issue_suspected": False, "notes": "n", "failure_source": source}
        )
    assert [r["labels"]["policy_compliance"]["label"] for r in reference[3:5]] == ["PRESENT", "LACKING"]
    assert reference[4]["failure_source"] == "agent"
    reference[3]["labels"]["policy_compliance"]["label"] = "LACKING"  # the reader differs on task 7's success
    reference[4]["failure_source"] = "user_simulator"  # and on the cause of task 7's failure
    paths = tmp_path / "reference.json", tmp_path / "sample.json"
    for path, content in zip(paths, (reference, sample), strict=True):
        path.write_text(json.dumps(content))
    return data, *paths, reference


def test_the_v1_items_are_the_half_joined_to_the_ingested_trajectories(bench, tmp_path: Path) -> None:
    data, reference, sample, entries = _round(tmp_path)
    items = bench.load_v1_items("test", data, reference, sample)
    assert [i.entry for i in items] == [entries[n] for n in (0, 1, 3, 4)]
    assert [i.trajectory.id for i in items] == [f"tiny_v1format/{n}" for n in (0, 1, 3, 4)]
    assert {i.domain for i in items} == {"retail"}
    assert [i.entry["index"] for i in bench.load_v1_items("tune", data, reference, sample)] == [2, 5]


def test_v1_round_measured_on_its_half_with_intervals_over_tasks(
    bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data, reference, sample, _ = _round(tmp_path)
    monkeypatch.setenv("TRACEGYM_SHARED_DATA", str(data))
    monkeypatch.setattr(bench, "V1_REFERENCE", reference)
    monkeypatch.setattr(bench, "V1_SAMPLE", sample)
    assert bench.main(["--v1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        "test half of the τ-bench v1 round (halves by task): 4 trajectories (2 failures) of 2 tasks"
    )
    assert out[0].endswith("95% intervals: bootstrap over the 2 tasks")
    rows = {line.split()[0]: line for line in out[2:7]}
    assert set(rows) == set(CAPABILITIES)
    # policy_compliance: (P,P) (L,L) on task 0, (L,P) (L,L) on task 7: κ 0.5; drawing tasks gives κ 1, 0.5 or 0
    assert rows["policy_compliance"].split()[1:5] == ["+0.50", "[+0.00,", "+1.00]", "+0.50"]
    assert all(rows[name].split()[1] in ("+1.00", "–") for name in CAPABILITIES if name != "policy_compliance")
    assert any(line.startswith("failure source: 1/2 agree") for line in out)
    assert [line.split()[1] for line in out if line.startswith("selection ")] == ["retail", "overall"]
    for refused in (["--v1", "--items"], ["--v1", "--folds", "2"], ["--v1", "--by-trajectory"]):
        with pytest.raises(SystemExit):
            bench.main(refused)
    monkeypatch.setenv("TRACEGYM_SHARED_DATA", str(tmp_path / "nowhere"))
    assert bench.main(["--v1"]) == 0 and capsys.readouterr().out.startswith("skipped:")


def test_the_v1_reference_labels_every_sample_entry_once_quoting_the_data(shared_data: Path) -> None:
    sample = json.loads((REPO / "labels" / "tau_v1_sample.json").read_text(encoding="utf-8"))
    reference = json.loads((REPO / "labels" / "tau_v1_reference.json").read_text(encoding="utf-8"))
    assert [r["entry"] for r in reference] == list(range(len(sample)))
    for entry, row in zip(sample, reference, strict=True):
        assert {k: row[k] for k in ("file", "index", "task_id", "trial", "reward")} == {
            k: entry[k] for k in ("file", "index", "task_id", "trial", "reward")
        }
        assert row["split"] == entry["half"] and list(row["labels"]) == list(CAPABILITIES)
        assert (row["failure_source"] is None) == (row["reward"] == 1.0)
    path = shared_data / sample[0]["file"]
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    records = json.loads(path.read_text())
    for row in reference:
        messages = records[row["index"]]["traj"]
        for verdict in row["labels"].values():
            if verdict["label"] != "LACKING":
                assert verdict["msg_idx"] is verdict["quote"] is None
                continue
            message = messages[verdict["msg_idx"]]
            shown = [message.get("content") or ""] + [
                f"{c['function']['name']}({c['function']['arguments']})" for c in message.get("tool_calls") or []
            ]
            assert any(verdict["quote"] in text for text in shown), (row["entry"], verdict["quote"])
