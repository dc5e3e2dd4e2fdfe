"""`tracegym diagnose` labels a run the same whatever other paths are passed with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tracegym.analysis.examples import example_results, write_example_run
from tracegym.cli import main


def _by_trajectory(out: Path, stem: str) -> tuple[dict, dict]:
    """{(trajectory, capability): (value, evidence)} and {trajectory: (source, reason)} of one run file."""
    labels = [json.loads(line) for line in (out / "labels.jsonl").read_text().splitlines()]
    sources = [json.loads(line) for line in (out / "failure_sources.jsonl").read_text().splitlines()]
    return ({(l["trajectory_id"], l["capability"]): (l["value"], l["evidence"]) for l in labels if l["trajectory_id"].startswith(stem + "/")},
            {s["trajectory_id"]: (s["source"], s["reason"]) for s in sources if s["trajectory_id"].startswith(stem + "/")})


def _diagnose(out: Path, *paths: Path) -> tuple[dict, dict]:
    assert main(["diagnose", *map(str, paths), "--out", str(out), "--bootstrap", "0"]) == 0
    return out


def test_labels_do_not_depend_on_a_task_file_beside_the_run(tmp_path: Path) -> None:
    alone = write_example_run(tmp_path / "alone")
    layout = write_example_run(tmp_path / "tau2" / "results" / "airline")
    tasks = example_results()["tasks"]
    for task in tasks:  # a "current" task set whose gold differs from the run's own
        task["evaluation_criteria"]["actions"] = task["evaluation_criteria"]["actions"][:1]
    (tmp_path / "tau2" / "domains" / "airline").mkdir(parents=True)
    (tmp_path / "tau2" / "domains" / "airline" / "tasks.json").write_text(json.dumps(tasks))
    first = _by_trajectory(_diagnose(tmp_path / "a", alone), alone.stem)
    second = _by_trajectory(_diagnose(tmp_path / "b", layout, tmp_path / "tau2" / "domains"), layout.stem)
    assert first == second and first[0] and first[1]


def test_a_real_runs_labels_do_not_depend_on_the_other_paths(shared_data: Path, tmp_path: Path) -> None:
    airline = shared_data / "tau2" / "results" / "airline"
    run = airline / "gpt-4.1-mini-2025-04-14__llm_agent__50sims_1trial.json"
    if not run.is_file():
        pytest.skip(f"{run} is absent")
    alone = tmp_path / "alone" / run.name
    alone.parent.mkdir()
    shutil.copy(run, alone)
    results = [_by_trajectory(_diagnose(tmp_path / "a", alone), run.stem),
               _by_trajectory(_diagnose(tmp_path / "b", run), run.stem),  # beside ../../domains/airline/tasks.json
               _by_trajectory(_diagnose(tmp_path / "c", airline, shared_data / "tau2" / "results" / "retail"), run.stem)]
    assert results[0] == results[1] == results[2]
    assert len(results[0][0]) == 50 * 5 and len(results[0][1]) == 22
