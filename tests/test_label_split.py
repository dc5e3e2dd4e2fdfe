"""labels/make_sample.py: the reference halves by task, and the τ-bench v1 round's draw, halves and blocks."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from types import ModuleType

import pytest
from benchmark_modules import load_benchmark

REPO = Path(__file__).resolve().parents[1]
SAMPLE = json.loads((REPO / "labels" / "sample.json").read_text(encoding="utf-8"))
V1_SAMPLE = json.loads((REPO / "labels" / "tau_v1_sample.json").read_text(encoding="utf-8"))


def _labels_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"labels_{name}", REPO / "labels" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


make_sample = _labels_module("make_sample")


def halves_of(entries: list[dict], task: str, half: str) -> dict[str, set[str]]:
    found = defaultdict(set)
    for entry in entries:
        found[entry[task]].add(entry[half])
    return found


def test_no_task_of_the_reference_has_trajectories_in_both_halves() -> None:
    halves = halves_of(SAMPLE, "task", "task_split")
    assert all(len(h) == 1 for h in halves.values()), [t for t, h in halves.items() if len(h) > 1]
    tasks = Counter(next(iter(h)) for h in halves.values())
    assert tasks["tune"] == len(halves) // 2 and tasks["tune"] + tasks["test"] == len(halves)
    for entry in SAMPLE:  # the task is the domain's, named as the file names it unless the run was another's
        domain, task_id = entry["task"].split("/", 1)
        assert domain == entry["run_file"].split("/")[0]
        assert task_id == entry["task_id"] or entry["run_file"].startswith("airline/gpt-4.1-mini")
    # the older split by trajectory is kept as drawn, and it did share tasks between its halves
    assert Counter(e["split"] for e in SAMPLE) == {"tune": 230, "test": 233}
    shared = halves_of(SAMPLE, "task", "split")
    assert sum(e["split"] == "test" and len(shared[e["task"]]) == 2 for e in SAMPLE) > 150


def test_the_task_split_sends_every_entry_with_its_task() -> None:
    entries = [{"n": n} for n in range(9)]
    tasks = ["a/1", "a/1", "a/2", "b/1", "b/1", "b/1", "a/3", "b/2", "a/2"]
    make_sample.split_by_task(entries, tasks, seed=7)
    halves = defaultdict(set)
    for entry, task in zip(entries, tasks, strict=True):
        assert entry["task"] == task
        halves[task].add(entry["task_split"])
    assert all(len(h) == 1 for h in halves.values())
    assert Counter(next(iter(h)) for h in halves.values()) == {"tune": 2, "test": 3}
    again = [{"n": n} for n in range(9)]
    make_sample.split_by_task(again, tasks, seed=7)
    assert again == entries
    with pytest.raises(ValueError):
        make_sample.split_by_task(entries, tasks[:-1])


def test_the_agreement_benchmark_measures_the_halves_by_task() -> None:
    bench = load_benchmark("diagnosis_agreement")
    by_task, by_trajectory = bench.sample_halves(), bench.sample_halves(by_task=False)
    assert by_task == {(e["run_file"], e["sim_id"]): e["task_split"] for e in SAMPLE}
    assert by_trajectory == {(e["run_file"], e["sim_id"]): e["split"] for e in SAMPLE}
    assert by_task != by_trajectory


def test_the_sample_files_are_what_make_sample_draws(shared_data: Path) -> None:
    if not (shared_data / "tau2" / "results").is_dir() or not (shared_data / make_sample.V1_FILE).is_file():
        pytest.skip("τ² runs or the τ-bench v1 file absent")
    drawn = make_sample.draw_all(shared_data)
    make_sample.split_by_task(drawn, make_sample.run_tasks(shared_data, drawn))
    assert drawn == SAMPLE
    assert make_sample.draw_v1(json.loads((shared_data / make_sample.V1_FILE).read_text())) == V1_SAMPLE


def test_the_v1_round_is_split_by_task_with_both_outcomes_in_every_half_and_block() -> None:
    assert len(V1_SAMPLE) >= 80
    halves = halves_of(V1_SAMPLE, "task_id", "half")
    assert all(len(h) == 1 for h in halves.values())
    assert Counter(e["task_id"] for e in V1_SAMPLE) == {task: 2 for task in halves}
    outcomes = Counter((e["half"], e["reward"] >= 1.0) for e in V1_SAMPLE)
    assert min(outcomes.values()) >= 15 and len(outcomes) == 4
    assert len({(e["index"]) for e in V1_SAMPLE}) == len(V1_SAMPLE)
    blocks = Counter((e["block"], e["half"]) for e in V1_SAMPLE)
    assert {b for b, _ in blocks} == {1, 2, 3, 4} and len(blocks) == 8 and max(blocks.values()) <= 12
    assert [e["block"] for e in V1_SAMPLE] == sorted(e["block"] for e in V1_SAMPLE)


def test_the_v1_draw_follows_its_plan() -> None:
    records = [
        {"task_id": task, "trial": trial, "reward": float(reward)}
        for task, rewards in enumerate(["1100", "0000", "1111", "0001", "0000", "1111", "0000", "1111"])
        for trial, reward in enumerate(rewards)
    ]
    drawn = make_sample.draw_v1(records, seed=3, all_fail=2, all_pass=2, blocks=2)
    by_task = defaultdict(list)
    for entry in drawn:
        assert records[entry["index"]]["task_id"] == int(entry["task_id"])
        by_task[entry["task_id"]].append(entry["reward"])
    assert {"0", "3"} <= set(by_task) and len(by_task) == 6  # both mixed tasks, two of each other kind
    assert sorted(by_task["0"]) == sorted(by_task["3"]) == [0.0, 1.0]
    assert sorted(sum(by_task.values(), [])).count(1.0) == 6
    with pytest.raises(ValueError):
        make_sample.draw_v1(records, all_fail=4)


def test_v1_entries_are_the_ingested_trajectories(shared_data: Path) -> None:
    from tracegym.analysis.ingest import ingest_paths

    path = shared_data / make_sample.V1_FILE
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    ingested = {t.id: t for t in ingest_paths([path]).trajectories}
    records = json.loads(path.read_text())
    for entry in V1_SAMPLE:
        trajectory = ingested[f"{path.stem}/{entry['index']}"]
        record = records[entry["index"]]
        assert trajectory.task_id == entry["task_id"] == str(record["task_id"])
        assert (
            (trajectory.trial, trajectory.reward)
            == (entry["trial"], entry["reward"])
            == (record["trial"], record["reward"])
        )
        assert len(trajectory.messages) == len(record["traj"])  # message indices carry over one to one


def test_block_files_show_every_entry_and_no_half(shared_data: Path, tmp_path: Path) -> None:
    render = _labels_module("render")
    if not (shared_data / make_sample.V1_FILE).is_file():
        pytest.skip("the τ-bench v1 file is absent")
    chosen = [e for e in V1_SAMPLE if e["block"] == 1][:3]
    (path,) = render.write_blocks(tmp_path, chosen, shared_data)
    text = path.read_text()
    assert "## The policy every run in this block was given" in text
    headers = [line for line in text.splitlines() if line.startswith(("# Block", "# entry", "reward "))]
    assert len(headers) == 1 + 2 * len(chosen)
    assert not any(word in line for line in headers for word in ("tune", "test", "half"))
    for number, entry in enumerate(chosen):
        record = render.v1_record(entry, shared_data)
        assert f"# entry {number}: {entry['file']} [{entry['index']}]" in text
        last = record["traj"][-1]
        assert f"[{len(record['traj']) - 1}] {last['role']}" in text
