"""`tracegym diagnose` labels a run the same whatever other paths are passed with it, and records of
the wrong kind inside a run do not stop the detectors."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from tracegym.analysis.attribution import attribute
from tracegym.analysis.detect_tau import CAPABILITIES, detect
from tracegym.analysis.examples import example_results, write_example_run
from tracegym.analysis.ingest import ingest_paths
from tracegym.cli import main
from tracegym.schema import Trajectory


def _by_trajectory(out: Path, stem: str) -> tuple[dict, dict]:
    """{(trajectory, capability): (value, evidence)} and {trajectory: (source, reason)} of one run file."""
    labels = [json.loads(line) for line in (out / "labels.jsonl").read_text().splitlines()]
    sources = [json.loads(line) for line in (out / "failure_sources.jsonl").read_text().splitlines()]
    return (
        {
            (label["trajectory_id"], label["capability"]): (label["value"], label["evidence"])
            for label in labels
            if label["trajectory_id"].startswith(stem + "/")
        },
        {s["trajectory_id"]: (s["source"], s["reason"]) for s in sources if s["trajectory_id"].startswith(stem + "/")},
    )


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
    results = [
        _by_trajectory(_diagnose(tmp_path / "a", alone), run.stem),
        _by_trajectory(_diagnose(tmp_path / "b", run), run.stem),  # beside ../../domains/airline/tasks.json
        _by_trajectory(_diagnose(tmp_path / "c", airline, shared_data / "tau2" / "results" / "retail"), run.stem),
    ]
    assert results[0] == results[1] == results[2]
    assert len(results[0][0]) == 50 * 5 and len(results[0][1]) == 22


HOSTILE = [None, "garbage", -1, 1e308, float("nan"), [], {}, [1, "x"], {"a": None}, True, "9" * 400]


def _hostile(value: Any, rng: random.Random) -> Any:
    """`value` with some fields replaced by values of the wrong kind, recursively."""
    if isinstance(value, dict):
        return {k: rng.choice(HOSTILE) if rng.random() < 0.15 else _hostile(v, rng) for k, v in value.items()}
    if isinstance(value, list):
        return [rng.choice(HOSTILE) if rng.random() < 0.15 else _hostile(v, rng) for v in value]
    return value


def _mangled(trajectory: Trajectory, rng: random.Random) -> Trajectory:
    """A copy whose JSON tool results, call arguments, gold actions and verdict details hold hostile values."""
    copy = trajectory.model_copy(deep=True)
    for message in copy.messages:
        if message.role == "tool" and message.content.startswith(("{", "[")):
            message.content = json.dumps(_hostile(json.loads(message.content), rng))
        for call in message.tool_calls:
            call.arguments = _hostile(call.arguments, rng)
    copy.diagnostics = _hostile(copy.diagnostics, rng)
    copy.metadata["policy"] = str(copy.metadata.get("policy") or "") + " The current time is 2024-13-45 99:99:99."
    return copy


def _survive(trajectories: list[Trajectory]) -> None:
    """Tool results, arguments and gold actions come from the run file: any field may hold anything."""
    for seed in range(3):
        rng = random.Random(seed)
        for trajectory in trajectories:
            mangled = _mangled(trajectory, rng)
            assert set(detect(mangled)) == set(CAPABILITIES)
            attribute(mangled)


def test_records_of_the_wrong_kind_do_not_stop_the_detectors(tmp_path: Path) -> None:
    _survive(ingest_paths([write_example_run(tmp_path)]).trajectories)


def test_real_runs_with_records_of_the_wrong_kind_do_not_stop_the_detectors(shared_data: Path) -> None:
    results = shared_data / "tau2" / "results"
    if not results.is_dir():
        pytest.skip(f"{results} is absent")
    _survive(
        [t for domain in ("airline", "retail", "telecom") for t in ingest_paths([results / domain]).trajectories[:12]]
    )
