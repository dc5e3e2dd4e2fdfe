"""Each ingest format on small files the project owns, and the cross-reference checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tracegym.analysis.examples import example_results, write_example_run
from tracegym.analysis.ingest import IngestError, ingest_paths

FIXTURES = Path(__file__).parent / "fixtures"


def _write(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_tau_v1_fixture() -> None:
    result = ingest_paths([FIXTURES / "tau_v1_small.json"])
    assert [s.format for s in result.sources] == ["tau_v1"] and result.inconsistencies == []
    first, second, third = result.trajectories
    assert first.source.benchmark == "tau-retail" and (first.task_id, first.trial, first.success) == ("0", 0, True)
    call = first.messages[2].tool_calls[0]
    assert call.name == "find_user_id_by_name_zip" and call.arguments == {
        "first_name": "Yusuf",
        "last_name": "Rossi",
        "zip": "19122",
    }
    assert first.messages[3].tool_call_id == call.id
    assert [a["name"] for a in second.diagnostics["gold_actions"]] == [
        "find_user_id_by_name_zip",
        "cancel_pending_order",
    ]
    assert second.diagnostics["gold_actions"][1]["arguments"]["reason"] == "no longer needed"
    assert third.diagnostics["outputs"] == ["10"] and third.messages[3].error is True
    assert third.metadata["user_instructions"].startswith("You are Mei Kovacs")


def test_tau_v1_cross_reference_checks(tmp_path: Path) -> None:
    records = json.loads((FIXTURES / "tau_v1_small.json").read_text())
    records[1]["info"]["task"]["instruction"] = "a different task under the same id"
    records[1]["info"]["reward_info"]["actions"] = records[1]["info"]["reward_info"]["actions"][:1]
    records[2]["traj"][3]["tool_call_id"] = "call_nowhere"
    result = ingest_paths([_write(tmp_path / "v1.json", records)])
    found = {(tuple(i.records), i.repaired) for i in result.inconsistencies}
    assert (("[0]", "[1]"), False) in found
    assert (("[1].info.reward_info.actions", "[1].info.task.actions"), False) in found
    assert (("[2].traj[3]",), False) in found
    assert len(result.trajectories) == 3


def test_chat_jsonl_fixture() -> None:
    result = ingest_paths([FIXTURES / "chat_small.jsonl"])
    a, b, c = result.trajectories
    assert a.source.format == "chat_jsonl" and a.messages[1].tool_calls[0].arguments == {"city": "Paris"}
    assert a.messages[3].content == "It is 18C and sunny in Paris." and a.success
    assert b.diagnostics == {"note": "no tool used"} and not b.success
    assert (c.id, c.task_id, c.success) == ("chat_small/3", "math", True)


def test_chat_jsonl_bad_line_names_the_line(tmp_path: Path) -> None:
    lines = (FIXTURES / "chat_small.jsonl").read_text().splitlines()
    lines[1] = lines[1][:40]
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError, match=r"chat.jsonl: line 2: truncated JSON at column 40"):
        ingest_paths([path])
    assert len(ingest_paths([path], keep_going=True).trajectories) == 2


def test_example_run_follows_the_contract(tmp_path: Path) -> None:
    result = ingest_paths([write_example_run(tmp_path)])
    summary = result.sources[0]
    assert (summary.format, summary.runs, summary.tasks, summary.successes, summary.failures) == (
        "tau2_results",
        4,
        3,
        2,
        2,
    )
    hasty = next(t for t in result.trajectories if t.id.endswith("/sim-1"))
    assert hasty.source.benchmark == "tau2-airline" and hasty.source.model == "example-agent"
    assert [a["name"] for a in hasty.diagnostics["gold_actions"]] == ["get_reservation_details", "cancel_reservation"]
    assert hasty.diagnostics["reward_info"]["action_checks"][0]["action_match"] is False
    assert hasty.metadata["policy"].startswith("# Example airline policy") and hasty.messages[0].content
    flight = next(t for t in result.trajectories if t.id.endswith("/sim-3"))
    assert flight.messages[3].role == "tool" and flight.messages[3].error is True
    assert result.inconsistencies == []


def test_tau2_task_missing_or_mismatched(tmp_path: Path) -> None:
    document = example_results()
    document["simulations"][2]["task_id"] = "99"  # verdict details still identify task 1
    document["simulations"][3]["task_id"] = "0"  # task 2's verdict under task 0's label, checks kept
    document["simulations"][3]["reward_info"]["communicate_checks"] = []
    result = ingest_paths([_write(tmp_path / "r.json", document)])
    by_record = {i.records[0]: i for i in result.inconsistencies}
    assert by_record["simulations[2]"].repaired and "task '99' is not in tasks[]" in by_record["simulations[2]"].message
    assert next(t for t in result.trajectories if t.id.endswith("/sim-2")).task_id == "1"
    assert not by_record["simulations[3]"].repaired and "label kept" in by_record["simulations[3]"].message
    assert next(t for t in result.trajectories if t.id.endswith("/sim-3")).task_id == "0"


def test_tool_result_checks(tmp_path: Path) -> None:
    document = example_results()
    document["simulations"][0]["messages"][3]["id"] = "never-called"
    document["simulations"][2]["messages"][3]["id"] = ""
    result = ingest_paths([_write(tmp_path / "r.json", document)])
    by_record = {i.records[0]: i for i in result.inconsistencies}
    assert not by_record["simulations[0].messages[3]"].repaired
    assert by_record["simulations[2].messages[3]"].repaired
    bag = next(t for t in result.trajectories if t.id.endswith("/sim-2"))
    assert bag.messages[3].tool_call_id == "e1"


def test_format_override_and_sniffing_ignore_file_names(tmp_path: Path) -> None:
    odd_name = tmp_path / "trajectories.jsonl"
    shutil.copy(write_example_run(tmp_path / "x"), odd_name)
    assert ingest_paths([odd_name]).sources[0].format == "tau2_results"
    assert len(ingest_paths([odd_name], fmt="tau2_results").trajectories) == 4
    with pytest.raises(IngestError, match="trajectories.jsonl: line 1"):
        ingest_paths([odd_name], fmt="chat_jsonl")
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        ingest_paths([odd_name], fmt="csv")


def test_same_source_named_twice_is_read_once(tmp_path: Path) -> None:
    path = write_example_run(tmp_path)
    assert len(ingest_paths([tmp_path, path]).trajectories) == 4
