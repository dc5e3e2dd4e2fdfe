"""τ² deterministic detectors on hand-built runs, and the diagnosis of the real airline runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracegym.analysis.attribution import attribute_deterministic
from tracegym.analysis.contrast import contrast, failing_for_every_agent, gold_changes
from tracegym.analysis.detect_tau import detect
from tracegym.analysis.diagnose import diagnose
from tracegym.analysis.ingest import ingest_paths
from tracegym.schema import LabelValue, Message, Source, ToolCall, Trajectory

P, L, N = LabelValue.PRESENT, LabelValue.LACKING, LabelValue.NA
PAPER_TAU_CAPABILITIES = {"structured_data_reasoning", "multi_step_task_completion", "precondition_verification",
                          "tool_calling_precision"}
CHANGED_AIRLINE_TASKS = {"2", "7", "9", "23", "27", "29", "33", "35", "37", "38", "44"}


def call(name: str, i: int, **arguments) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=f"c{i}", name=name, arguments=arguments)])


def result(i: int, content: str = "{}", error: bool = False) -> Message:
    return Message(role="tool", tool_call_id=f"c{i}", content=content, error=error)


def run(messages: list[Message], gold: list[dict], matched: list[bool] | None = None, success: bool = False,
        termination: str = "user_stop", communicate: list[dict] | None = None, task: str = "1", agent: str = "a") -> Trajectory:
    gold = [{"action_id": f"g{i}", "requestor": "assistant", "compare_args": None, **g} for i, g in enumerate(gold)]
    checks = [{"action": g, "action_match": m, "action_reward": float(m)} for g, m in zip(gold, matched or [])]
    return Trajectory(
        id=f"{agent}/{task}/{len(messages)}", task_id=task, source=Source(benchmark="tau2-airline", format="tau2_results", file="x", agent=agent),
        messages=messages, reward=1.0 if success else 0.0, success=success, termination_reason=termination,
        diagnostics={"reward_info": {"reward": 1.0 if success else 0.0, "action_checks": checks, "communicate_checks": communicate},
                     "gold_actions": gold, "communicate_info": [c["info"] for c in communicate or []]},
        metadata={"domain": "airline"})


CANCEL = {"name": "cancel_reservation", "arguments": {"reservation_id": "ABC"}}
READ = {"name": "get_reservation_details", "arguments": {"reservation_id": "ABC"}}


def test_clean_run_is_present_everywhere_it_applies() -> None:
    messages = [Message(role="user", content="cancel ABC please"), call("get_reservation_details", 1, reservation_id="ABC"),
                result(1, '{"reservation_id": "ABC"}'), call("cancel_reservation", 2, reservation_id="ABC"), result(2)]
    verdicts = detect(run(messages, [READ, CANCEL], [True, True], success=True))
    assert {k: v.value for k, v in verdicts.items()} == {
        "structured_data_reasoning": P, "multi_step_task_completion": P, "precondition_verification": P,
        "tool_calling_precision": P, "policy_compliance": P}


def test_wrong_record_is_structured_data_reasoning_and_unread_write_is_precondition() -> None:
    # The agent cancels XYZ (a real id it saw) instead of ABC, without reading XYZ first.
    messages = [Message(role="user", content="my reservations are ABC and XYZ"),
                call("get_reservation_details", 1, reservation_id="ABC"), result(1),
                call("cancel_reservation", 2, reservation_id="XYZ"), result(2)]
    verdicts = detect(run(messages, [READ, CANCEL], [True, False]))
    assert verdicts["structured_data_reasoning"].value == L
    assert verdicts["structured_data_reasoning"].evidence[0].message_index == 3
    assert "gold wants reservation_id='ABC'" in verdicts["structured_data_reasoning"].evidence[0].quote
    assert verdicts["precondition_verification"].value == L
    assert "without reading" in verdicts["precondition_verification"].evidence[0].quote
    assert verdicts["tool_calling_precision"].value == P  # the wrong value was grounded in the conversation


def test_invented_argument_errors_and_repeats_are_tool_calling_precision() -> None:
    messages = [Message(role="user", content="cancel ABC"), call("get_reservation_details", 1, reservation_id="ABC"), result(1),
                call("cancel_reservation", 2, reservation_id="abc-1"), result(2),
                *[m for i in range(3, 6) for m in (call("get_flight_status", i, flight="HAT1"), result(i, "Error: bad date", error=True))]]
    verdicts = detect(run(messages, [READ, CANCEL], [True, False]))
    precision = verdicts["tool_calling_precision"]
    assert precision.value == L
    quotes = " | ".join(e.quote for e in precision.evidence)
    assert "gold wants reservation_id='ABC'" in quotes and "error: Error: bad date" in quotes and "called 3 times identically" in quotes
    assert verdicts["structured_data_reasoning"].value == P


def test_missed_step_loop_and_uncommunicated_info() -> None:
    book = {"name": "book_reservation", "arguments": {"user_id": "u1"}}
    messages = [Message(role="user", content="cancel ABC then book"), call("get_reservation_details", 1, reservation_id="ABC"),
                result(1), call("cancel_reservation", 2, reservation_id="ABC"), result(2), Message(role="assistant", content="Done!")]
    trajectory = run(messages, [READ, CANCEL, book], [True, True, False],
                     communicate=[{"info": "refund 120", "met": False}])
    verdicts = detect(trajectory)
    assert verdicts["multi_step_task_completion"].value == L
    assert "never attempted: book_reservation" in verdicts["multi_step_task_completion"].evidence[0].quote
    assert verdicts["structured_data_reasoning"].value == L
    assert "not communicated: refund 120" in verdicts["structured_data_reasoning"].evidence[0].quote
    looping = detect(run(messages, [READ], [True], termination="max_steps"))
    assert looping["multi_step_task_completion"].value == L and looping["multi_step_task_completion"].evidence[0].message_index == 5


def test_policy_compliance_transfers_and_forbidden_writes() -> None:
    transfer = [Message(role="user", content="hi"), call("transfer_to_human_agents", 1, summary="x"), result(1)]
    assert detect(run(transfer, [READ], [False]))["policy_compliance"].value == L
    assert detect(run(transfer, [{"name": "transfer_to_human_agents", "arguments": {"summary": "y"}}], [False]))["policy_compliance"].value == P
    forbidden = [Message(role="user", content="cancel ABC"), call("get_reservation_details", 1, reservation_id="ABC"),
                 result(1), call("cancel_reservation", 2, reservation_id="ABC"), result(2)]
    verdict = detect(run(forbidden, [READ], [True]))["policy_compliance"]
    assert verdict.value == L and "policy forbids" in verdict.evidence[0].quote
    assert detect(run([Message(role="user", content="hi")], []))["tool_calling_precision"].value == N


def test_contrast_pairs_and_all_fail_tasks() -> None:
    a = run([Message(role="user", content="x")], [], success=True, task="1", agent="a")
    b = run([Message(role="user", content="y")], [], success=False, task="1", agent="b")
    c = run([Message(role="user", content="z")], [], success=False, task="2", agent="a")
    d = run([Message(role="user", content="w")], [], success=False, task="2", agent="b")
    pairs = contrast([a, b, c, d])
    assert [(p.task, p.pairs) for p in pairs] == [("tau2-airline:1", [(a.id, b.id)])]
    assert [e["task"] for e in failing_for_every_agent([a, b, c, d])] == ["tau2-airline:2"]
    assert failing_for_every_agent([c]) == []  # one agent is not evidence of a benchmark error


def test_known_corrections_used_without_a_reference_file(tmp_path: Path) -> None:
    failed = run([Message(role="user", content="x")], [READ], [False], task="7")
    changed = gold_changes([failed], [tmp_path])
    assert "known list" in changed["tau2-airline:7"].reason
    assert attribute_deterministic([failed], changed)[failed.id].source == "benchmark"


@pytest.fixture(scope="module")
def airline(shared_data: Path):
    folder = shared_data / "tau2" / "results" / "airline"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    trajectories = ingest_paths([folder]).trajectories
    return folder, trajectories, diagnose(trajectories, [folder])


def test_airline_selects_the_papers_capabilities_with_intervals(airline) -> None:
    _, _, diagnosis = airline
    report = diagnosis.report
    chosen = PAPER_TAU_CAPABILITIES.intersection(report.selected)
    assert len(chosen) >= 3, report.selected
    for stats in report.capabilities:
        if stats.capability.name in chosen:
            low, high = stats.delta_ci
            assert low <= stats.delta_mean <= high and low > 0
            assert stats.delta_mean >= 0.2 and stats.cov[0] >= 0.1
            assert stats.explained_failures and all(e["evidence"] for e in stats.explained_failures)
    assert "tau2-airline:7" in {e["task"] for e in report.possible_benchmark_errors}
    assert 0 < report.union_coverage <= 1


def test_airline_gold_changed_tasks_flagged_not_blamed(airline) -> None:
    folder, trajectories, diagnosis = airline
    reference = folder.parents[1] / "domains" / "airline" / "tasks.json"
    if not reference.is_file():
        pytest.skip(f"{reference} is absent")
    assert {key.split(":")[1] for key in diagnosis.gold_changed} == CHANGED_AIRLINE_TASKS
    blamed_on_benchmark = {t for t, s in diagnosis.sources.items() if s.source == "benchmark"}
    assert blamed_on_benchmark, "no failure attributed to the corrected gold"
    by_id = {t.id: t for t in trajectories}
    assert all(by_id[t].task_id in CHANGED_AIRLINE_TASKS for t in blamed_on_benchmark)
    counted = {e["trajectory_id"] for s in diagnosis.report.capabilities for e in s.explained_failures}
    assert not counted & blamed_on_benchmark
    assert diagnosis.report.failure_sources["benchmark"] == len(blamed_on_benchmark)
