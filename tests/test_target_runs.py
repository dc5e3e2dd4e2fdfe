"""Runs of the target environment written as τ²-bench Results and trajectories, read back by
`tracegym ingest` and labelled by `tracegym diagnose` like real τ²-bench runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracegym.cli import main
from tracegym.eval.target import TargetEnvironment, make_target, play_oracle, write_runs
from tracegym.eval.target.runs import play_turns, results_document
from tracegym.schema import Trajectory, read_jsonl

WRITES = ("book_reservation", "cancel_reservation", "modify_reservation_dates", "change_room_type")

SEEDS = range(14)  # two tasks of each kind


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[TargetEnvironment, list, Path, Path, list[Trajectory]]:
    """Oracle episodes (trial 0) and every wrong trajectory (trials 1..) of 14 train tasks."""
    env = make_target()
    records = []
    for seed in SEEDS:
        records.append(play_oracle(env, seed))
        records += [play_turns(env, seed, turns, trial=1 + i) for i, turns in enumerate(env.wrong_trajectories(seed))]
    root = tmp_path_factory.mktemp("target_runs")
    results, trajectories = root / "results" / "hotel.json", root / "trajectories.jsonl"
    written = write_runs(
        env,
        records,
        results,
        trajectories,
        agent="scripted_agent",
        model="oracle+wrong",
        timestamp="2025-06-10T00:00:00+00:00",
    )
    return env, records, results, trajectories, written


def test_results_file_has_the_tau2_layout(written) -> None:
    env, records, results, _, _ = written
    document = json.loads(results.read_text(encoding="utf-8"))
    assert set(document) == {"timestamp", "info", "tasks", "simulations"}
    info = document["info"]
    assert info["agent_info"] == {"implementation": "scripted_agent", "llm": "oracle+wrong"}
    assert info["user_info"] == {"implementation": "scripted_user", "llm": "scripted"}
    assert info["environment_info"]["domain_name"] == "hotel" and "G3" in info["environment_info"]["policy"]
    assert len(info["environment_info"]["tool_defs"]) == len(env.tools)
    assert info["num_trials"] == 1 + max(r.trial for r in records) and info["max_steps"] == env.max_turns
    assert len(document["tasks"]) == len(SEEDS) and len(document["simulations"]) == len(records)
    simulation = document["simulations"][0]
    assert {"id", "task_id", "trial", "seed", "termination_reason", "messages", "reward_info"} <= set(simulation)
    call = next(m for m in simulation["messages"] if m["tool_calls"])
    result = next(m for m in simulation["messages"] if m["role"] == "tool")
    assert call["content"] is None and set(call["tool_calls"][0]) == {"id", "name", "arguments", "requestor"}
    assert (
        result["id"] == call["tool_calls"][0]["id"] and result["error"] is False and result["requestor"] == "assistant"
    )
    assert {
        "db_check",
        "action_checks",
        "communicate_checks",
        "nl_assertions",
        "reward_basis",
        "reward_breakdown",
    } <= set(simulation["reward_info"])


def test_ingest_reads_every_simulation_with_its_verdict(written, tmp_path: Path) -> None:
    _, records, results, trajectories, returned = written
    assert main(["ingest", str(results), "--out", str(tmp_path / "ingested")]) == 0
    report = json.loads((tmp_path / "ingested" / "ingest_report.json").read_text(encoding="utf-8"))
    assert [s["format"] for s in report["sources"]] == ["tau2_results"]
    assert report["skipped"] == [] and report["inconsistencies"] == []
    ingested = {t.id: t for t in read_jsonl(tmp_path / "ingested" / "trajectories.jsonl")}
    assert len(ingested) == len(records)
    assert [t.model_dump() for t in read_jsonl(trajectories)] == [t.model_dump(mode="json") for t in returned]
    for record in records:
        trajectory = ingested[f"hotel/{record.task.id}-t{record.trial}"]
        assert trajectory.reward == record.reward and trajectory.success == (record.reward == 1.0)
        assert trajectory.source.benchmark == "tau2-hotel" and trajectory.task_id == record.task.id
        assert trajectory.termination_reason == record.termination_reason
        assert trajectory.diagnostics["reward_info"] == record.reward_info
        assert len(trajectory.diagnostics["gold_actions"]) == len(record.task.actions)
        assert [
            (m.role, m.content, m.error, m.tool_call_id, [(c.id, c.name, c.arguments) for c in m.tool_calls])
            for m in trajectory.messages
        ] == [
            (m.role, m.content, m.error, m.tool_call_id, [(c.id, c.name, c.arguments) for c in m.tool_calls])
            for m in record.messages
        ]
    assert any(m.error for t in ingested.values() for m in t.messages), "tool errors travel with their results"
    assert sum(t.success for t in ingested.values()) == len(SEEDS)


def test_diagnose_labels_the_failures_from_their_verdicts(written, tmp_path: Path) -> None:
    _, records, results, _, _ = written
    assert main(["diagnose", str(results), "--out", str(tmp_path / "diagnosis")]) == 0
    lacking: dict[str, set[str]] = {}
    for line in (tmp_path / "diagnosis" / "labels.jsonl").read_text(encoding="utf-8").splitlines():
        label = json.loads(line)
        if label["value"] == "LACKING":
            lacking.setdefault(label["trajectory_id"], set()).add(label["capability"])
    missed = forbidden = 0
    for record in records:
        found = lacking.get(f"hotel/{record.task.id}-t{record.trial}", set())
        if record.reward == 1.0:
            assert not found, (record.task.id, found)
            continue
        called = {m.tool_calls[0].name for m in record.messages if m.tool_calls}
        calls = [c for m in record.messages for c in m.tool_calls]
        attempted = {(c.name, c.arguments.get("reservation_id")) for m in record.messages for c in m.tool_calls}
        steps = [a for a in record.task.actions if a.name in WRITES]
        never = [a for a in steps if (a.name, a.arguments.get("reservation_id")) not in attempted]
        if never and len(steps) >= 2:  # a write of a multi-step task never attempted (a skipped look-up is no step)
            assert "multi_step_task_completion" in found, record.task.id
            missed += 1
        writes = [name for name in called if name in ("cancel_reservation", "change_room_type")]
        gold_writes = [a for a in record.task.actions if a.name in ("cancel_reservation", "change_room_type")]
        read = {c.arguments.get("reservation_id") for c in calls if c.name == "get_reservation_details"}
        written = {c.arguments.get("reservation_id") for c in calls if c.name in WRITES}
        if writes and not gold_writes and record.task.kind != "billing_dispute":  # granted a forbidden request
            # knowingly (the record read first: the policy broken), or blindly (never read: its conditions unchecked)
            expected = "policy_compliance" if written <= read else "precondition_verification"
            assert expected in found, (record.task.id, found)
            forbidden += 1
    assert missed >= 2 and forbidden >= 4
    report = json.loads((tmp_path / "diagnosis" / "capabilities.json").read_text(encoding="utf-8"))
    assert report["params"]["trajectories"] == len(records)


def test_the_writer_refuses_what_the_reader_would_not_accept(written, tmp_path: Path) -> None:
    env, records, _, _, _ = written
    with pytest.raises(ValueError, match="repeat task and trial"):
        results_document(env, [records[0], records[0]], "agent", "model")
    planted = play_oracle(env, 0)
    planted.reward_info = {
        **planted.reward_info,
        "communicate_checks": [{"info": "a different fact", "met": True, "justification": ""}],
    }
    with pytest.raises(RuntimeError, match="does not accept what was written: .*communicate_info"):
        write_runs(env, [planted], tmp_path / "bad.json", tmp_path / "bad.jsonl", model="m")
    assert not (tmp_path / "bad.jsonl").exists()
