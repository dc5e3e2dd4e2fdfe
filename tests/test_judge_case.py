"""What the LLM judge is shown about a run: the transcript within its budget, and the case file."""

from __future__ import annotations

import re
from pathlib import Path

from tracegym.analysis.ingest import ingest_paths
from tracegym.analysis.judge import judged_text
from tracegym.analysis.judge_case import (
    MIN_MESSAGE_CHARS,
    TRANSCRIPT_CHARS,
    case_file,
    conventions,
    message_text,
    render_transcript,
)
from tracegym.schema import Message, Source, ToolCall, Trajectory


def run(contents: list[str], **extra) -> Trajectory:
    messages = [Message(role="tool" if i % 2 else "assistant", content=text) for i, text in enumerate(contents)]
    return Trajectory(
        id="r/1",
        task_id="1",
        source=Source(benchmark="tau2-airline", format="tau2_results", file="x"),
        messages=messages,
        reward=0.0,
        success=False,
        termination_reason="user_stop",
        **extra,
    )


def numbered(rendered: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\[(\d+)\] \w+: (.*)$", rendered, re.MULTILINE)}


def test_a_run_within_the_budget_is_shown_whole() -> None:
    trajectory = run(["I will look it up.", '{"flights": [' + ", ".join(f'"HAT{i:03d}"' for i in range(300)) + "]}"])
    assert len(message_text(trajectory.messages[1])) > 600  # the old per-message cut would have lost most of it
    assert numbered(render_transcript(trajectory)) == {i: message_text(m) for i, m in enumerate(trajectory.messages)}


def test_over_the_budget_the_longest_messages_are_cut_to_one_length_and_short_ones_stay_whole() -> None:
    contents = ["Your refund is $120.", "x" * 9_000, "Shall I cancel?", "y" * 3_000, "z" * 700]
    shown = numbered(render_transcript(run(contents), budget=4_000))
    assert sorted(shown) == [0, 1, 2, 3, 4]  # every message, under its own index
    assert shown[0] == contents[0] and shown[2] == contents[2]
    assert len(shown[1]) == len(shown[3]) and shown[1].endswith("…") and shown[1].startswith("xxx")
    assert shown[4] == contents[4] or len(shown[4]) == len(shown[1])  # cut only if no shorter common cut fits
    assert len(render_transcript(run(contents), budget=4_000)) <= 4_000


def test_a_run_too_long_even_at_the_smallest_cut_leaves_out_middle_messages() -> None:
    contents = [f"step {i} " + "w" * 500 for i in range(400)]
    rendered = render_transcript(run(contents), budget=8_000)
    shown = numbered(rendered)
    assert 0 in shown and 399 in shown and len(shown) < 400
    assert f"[... {400 - len(shown)} messages left out ...]" in rendered
    assert all(len(text) <= MIN_MESSAGE_CHARS for text in shown.values())
    assert len(rendered) <= 8_000


def test_the_case_file_holds_what_a_careful_reader_reads() -> None:
    trajectory = run(
        ["hello"],
        metadata={
            "policy": "Basic economy flights cannot be modified.",
            "user_instructions": {"reason_for_call": "change my flight"},
        },
        diagnostics={
            "gold_actions": [{"name": "cancel_reservation", "arguments": {"reservation_id": "ABC"}}],
            "reward_info": {
                "action_checks": [
                    {
                        "action": {"name": "cancel_reservation", "arguments": {"reservation_id": "ABC"}},
                        "action_match": False,
                    }
                ]
            },
        },
    )
    case = case_file(trajectory)
    assert "Basic economy flights cannot be modified." in case and "change my flight" in case
    assert '- cancel_reservation({"reservation_id": "ABC"}), matched by the agent: False' in case
    assert "evidence, not truth" in case and "reward 0.0, ended by user_stop" in case
    assert "- none: the task expects no action" in case_file(run(["hello"], diagnostics={"gold_actions": []}))
    by_user = {"gold_actions": [{"name": "toggle_data", "arguments": {}, "requestor": "user"}]}
    assert "- toggle_data({}) (the user's action)" in case_file(run(["hello"], diagnostics=by_user))
    issue = case_file(run(["hello"], metadata={"problem_statement": "TypeError in parse()"}))
    assert "## The task given to the agent\nTypeError in parse()" in issue and "hidden" not in issue
    bare = case_file(run(["hello"]))
    assert "Policy" not in bare and "instructions" not in bare and "Gold" not in bare and "reward 0.0" in bare


def test_tau_conventions_are_written_and_other_families_have_none() -> None:
    written = conventions({"tau"})
    assert "wrong record" in written and "A check the agent never made is not data reasoning" in written
    assert conventions({"swe"}) == "" and conventions(set()) == ""


def test_every_real_run_reaches_the_judge_within_budget_with_its_policy_and_last_message(shared_data: Path) -> None:
    files = sorted((shared_data / "tau2" / "results").glob("*/*.json"))
    trajectories = ingest_paths(files).trajectories
    assert len(trajectories) > 600
    for trajectory in trajectories:
        transcript = render_transcript(trajectory)
        assert len(transcript) <= TRANSCRIPT_CHARS, trajectory.id
        assert f"[{len(trajectory.messages) - 1}] " in transcript, trajectory.id
        text = judged_text(trajectory)
        assert "## Policy the agent was given" in text and "## Gold actions" in text, trajectory.id


def test_tool_calls_and_errors_are_part_of_a_message() -> None:
    message = Message(
        role="assistant",
        content="Checking.",
        error=True,
        tool_calls=[ToolCall(id="c", name="get_user_details", arguments={"user_id": "u1"})],
    )
    assert message_text(message) == 'ERROR Checking. CALL get_user_details({"user_id": "u1"})'
