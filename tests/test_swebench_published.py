"""SWE-bench Verified submissions as the experiments repository publishes them
(tests/fixtures/swebench_published: OpenHands completions, SWE-agent `.traj`, mini-swe-agent
`.traj.json`, a patch-only submission), and the real OpenHands run rewritten into that layout."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tracegym.analysis.detect_swe import commands, detect
from tracegym.analysis.ingest import IngestError, ingest_paths
from tracegym.analysis.ingest.openhands import SUMMARY, conversation, latest_completion, read_summary, text_calls
from tracegym.cli import main
from tracegym.schema import LabelValue, Message, Trajectory

P, L, N = LabelValue.PRESENT, LabelValue.LACKING, LabelValue.NA
PUBLISHED = Path(__file__).parent / "fixtures" / "swebench_published"
OPENHANDS, SWE_AGENT, MINI, PATCH_ONLY = (
    "20241204_openhands-codeact",
    "20250101_swe-agent",
    "20250102_mini-swe-agent",
    "20250103_patch-only",
)
CAPABILITIES = ("patch_production", "fault_localisation", "issue_reproduction", "test_verification", "edit_scope")
# instance -> (resolved, trajectory kind, labels in CAPABILITIES order)
EXPECTED = {
    "pkg__pkg-10": (True, "openhands", (P, N, P, P, P)),
    "pkg__pkg-11": (False, "openhands", (P, L, L, L, L)),
    "pkg__pkg-12": (False, "openhands", (L, N, N, N, N)),
    "pkg__pkg-20": (True, "swe-agent", (P, N, P, P, P)),
    "pkg__pkg-21": (False, "swe-agent", (L, N, P, L, N)),
    "pkg__pkg-30": (True, "mini-swe-agent", (P, N, P, P, P)),
    "pkg__pkg-31": (False, "mini-swe-agent", (P, N, L, L, L)),
    "pkg__pkg-40": (True, "none", (P, N, N, N, P)),
    "pkg__pkg-41": (False, "none", (P, N, N, N, L)),
    "pkg__pkg-42": (False, "none", (L, N, N, N, N)),
}


@pytest.fixture(scope="module")
def published() -> dict[str, Trajectory]:
    return {t.task_id: t for t in ingest_paths([PUBLISHED], keep_going=True).trajectories}


def test_every_layout_ingests_with_its_verdicts_and_a_skipped_record_for_what_it_cannot_read() -> None:
    result = ingest_paths([PUBLISHED], keep_going=True)
    by_task = {t.task_id: t for t in result.trajectories}
    assert sorted(by_task) == sorted(EXPECTED)
    assert {s.format for s in result.sources} == {"swebench_experiments"} and len(result.sources) == 4
    for instance, (resolved, kind, _) in EXPECTED.items():
        trajectory = by_task[instance]
        assert trajectory.success is resolved and trajectory.reward == float(resolved), instance
        assert trajectory.metadata["trajectory_format"] == kind, instance
    broken, patch_only = sorted(result.skipped, key=lambda s: s.path)
    assert broken.path.endswith("trajs/pkg__pkg-13/claude-3-5-sonnet-20241022_2024-12-04T11:00:00.json")
    assert broken.reason.startswith("truncated JSON") and broken.json_path.startswith("fncall_messages[1]")
    assert patch_only.path.endswith(f"{PATCH_ONLY}/trajs") and patch_only.reason.startswith("no trajectories")
    assert "its 3 instances are labelled from their verdict" in patch_only.reason
    assert not result.inconsistencies
    with pytest.raises(IngestError, match="truncated JSON"):
        ingest_paths([PUBLISHED / OPENHANDS])
    with pytest.raises(IngestError, match="no trajectories: a patch-only submission"):
        ingest_paths([PUBLISHED / PATCH_ONLY])
    assert len(ingest_paths([PUBLISHED / SWE_AGENT]).trajectories) == 2  # the .debug.log beside a .traj is no record


def test_openhands_completions_structured_calls_preferred_else_the_text_calls(published) -> None:
    structured, text, latest = published["pkg__pkg-10"], published["pkg__pkg-11"], published["pkg__pkg-12"]
    assert structured.source.model == "claude-3-5-sonnet-20241022" and structured.source.agent.startswith("OpenHands")
    assert [c.id for m in structured.messages for c in m.tool_calls][0] == "toolu_00"  # from fncall_messages
    assert structured.messages[-1].tool_calls[0].name == "finish"  # fncall_response's final reply
    edit = text.messages[2]
    assert edit.content == "The renderer must be wrong." and edit.tool_calls[0].arguments == {
        "command": "str_replace",
        "path": "/workspace/pkg__pkg__1.0/pkg/render.py",
        "old_str": "return a",
        "new_str": "return b",
    }
    result = text.messages[3]
    assert result.role == "tool" and result.tool_call_id == edit.tool_calls[0].id
    assert result.content.startswith("The file /workspace/pkg__pkg__1.0/pkg/render.py has been edited")
    assert latest.source.file.endswith("2024-12-04T10:31:30.json")  # of two completions, the later one
    assert structured.diagnostics["patch"] is None and structured.diagnostics["patch_exists"] is None
    assert "parse('x') returns a instead of b" == structured.metadata["problem_statement"]


def test_openhands_fncall_messages_without_fncall_response_keep_the_plain_final_reply() -> None:
    bash = {"name": "execute_bash", "arguments": '{"command": "ls"}'}
    call = {"id": "toolu_01", "type": "function", "function": bash}
    final = {"role": "assistant", "content": "Done.\n<function=finish>\n</function>"}
    document = {
        "fncall_messages": [
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "Looking.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "toolu_01", "name": "execute_bash", "content": "pkg"},
        ],
        "messages": [{"role": "user", "content": "fix it"}],
        "response": {"choices": [{"message": final}]},
        "kwargs": {},
    }
    messages = conversation(document)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[-1].content == "Done." and [c.name for c in messages[-1].tool_calls] == ["finish"]
    assert messages[-1].tool_calls[0].id == "text-3-0"
    structured = document | {"fncall_response": {"choices": [{"message": {"role": "assistant", "content": "Bye."}}]}}
    assert conversation(structured)[-1].content == "Bye."  # fncall_response preferred when present


def test_swe_agent_steps_after_the_task_and_patches_from_their_records(published) -> None:
    steps = published["pkg__pkg-20"]
    assert steps.messages[0].role == "user" and "<uploaded_files>\n/testbed" in steps.messages[0].content
    assert steps.metadata["problem_statement"] == "parse('x') returns a instead of b"
    assert steps.diagnostics["patch_source"] == "info.submission"
    assert published["pkg__pkg-21"].diagnostics["patch"] == ""  # info.submission null: nothing submitted
    assert published["pkg__pkg-31"].source.model == "gemini/gemini-3-pro-preview"
    assert published["pkg__pkg-41"].diagnostics["patch_source"] == "all_preds.jsonl"
    assert published["pkg__pkg-42"].diagnostics["patch_source"] == "results.json no_generation"


def test_labels_come_from_the_actions_with_evidence_and_no_resolved_instance_lacks_a_patch(published) -> None:
    for instance, (resolved, kind, expected) in EXPECTED.items():
        trajectory = published[instance]
        verdicts = detect(trajectory)
        assert tuple(verdicts[c].value for c in CAPABILITIES) == expected, instance
        assert all(v.evidence for v in verdicts.values() if v.value != N), instance
        for name in ("issue_reproduction", "test_verification"):
            for entry in verdicts[name].evidence:
                quoted = entry.quote.split(": ", 1)[1].rstrip("…")
                said = [c for i, _, c in commands(trajectory) if i == entry.message_index]
                assert any(" ".join(c.split()).startswith(quoted) for c in said), (instance, quoted, said)
        if resolved:
            assert verdicts["patch_production"].value == P
        if kind == "none":
            assert not trajectory.messages
    hasty = detect(published["pkg__pkg-11"])
    (left,) = hasty["edit_scope"].evidence
    assert left.message_index == 4 and "left debug_render.py in the repository" in left.quote
    assert "the actions (no patch record) edit pkg/render.py" in hasty["fault_localisation"].evidence[0].quote
    assert (
        "no repository file edited in 2 turns" in detect(published["pkg__pkg-12"])["patch_production"].evidence[0].quote
    )
    assert "empty patch (info.submission); agent exit_status: exit_cost" in (
        detect(published["pkg__pkg-21"])["patch_production"].evidence[0].quote
    )
    assert "empty patch (results.json no_generation)" in (
        detect(published["pkg__pkg-42"])["patch_production"].evidence[0].quote
    )


def test_text_calls_tolerate_a_missing_closing_tag_and_several_calls() -> None:
    messages = [
        Message(role="user", content="fix it"),
        Message(
            role="assistant",
            content="Two steps.\n<function=execute_bash>\n<parameter=command>\nls\n</parameter>\n</function>\n"
            "<function=str_replace_editor>\n<parameter=command>view</parameter>\n<parameter=path>/a.py</parameter>",
        ),
        Message(role="user", content="EXECUTION RESULT of [str_replace_editor]:\n1\tx = 1"),
        Message(role="user", content="EXECUTION RESULT of [execute_bash]:\na.py"),
        Message(role="user", content="EXECUTION RESULT of [execute_bash]:\nanswers no pending call"),
    ]
    converted = text_calls(messages)
    bash, view = converted[1].tool_calls
    assert converted[1].content == "Two steps." and bash.arguments == {"command": "ls"}
    assert view.arguments == {"command": "view", "path": "/a.py"}
    assert [(m.role, m.tool_call_id, m.content) for m in converted[2:]] == [
        ("tool", view.id, "1\tx = 1"),
        ("tool", bash.id, "a.py"),
        ("user", None, "EXECUTION RESULT of [execute_bash]:\nanswers no pending call"),
    ]
    assert messages[1].tool_calls == []  # the input is left as it was


def test_diagnose_reads_every_published_layout(tmp_path: Path, capsys) -> None:
    out = tmp_path / "diag"
    assert main(["diagnose", str(PUBLISHED), "--out", str(out), "--keep-going", "--bootstrap", "50"]) == 0
    labels = [json.loads(line) for line in (out / "labels.jsonl").read_text().splitlines()]
    resolved = {f"{s}/{i}" for s in (OPENHANDS, SWE_AGENT, MINI, PATCH_ONLY) for i, e in EXPECTED.items() if e[0]}
    patch = {label["trajectory_id"]: label["value"] for label in labels if label["capability"] == "patch_production"}
    assert len(patch) == len(EXPECTED) and all(patch[t] == "PRESENT" for t in resolved if t in patch)
    markdown = (out / "report.md").read_text()
    assert "no trajectories: a patch-only submission" in markdown and "pkg__pkg-13" in markdown
    assert "skipped records (2)" in capsys.readouterr().out


# --- the real OpenHands run, rewritten as the experiments repository publishes it


@pytest.fixture(scope="module")
def openhands_run(shared_data: Path) -> Path:
    runs = sorted((shared_data / "swebench").glob("openhands-*/evaluation/evaluation_outputs/outputs/*/*/*"))
    if not runs:
        pytest.skip(f"no OpenHands run under {shared_data / 'swebench'}")
    return runs[0]


def _text_form(messages: list[dict]) -> list[dict]:
    """Native function-calling messages as OpenHands writes them without it: calls as text in the
    assistant turn, results as "EXECUTION RESULT of [NAME]:" user turns."""
    converted = []
    for message in messages:
        content = message.get("content")
        text = "".join(p.get("text", "") for p in content) if isinstance(content, list) else content or ""
        if message["role"] == "tool":
            converted.append({"role": "user", "content": f"EXECUTION RESULT of [{message['name']}]:\n{text}"})
            continue
        for call in message.get("tool_calls") or []:
            arguments = json.loads(call["function"]["arguments"] or "{}")
            rendered = [
                f"<parameter={k}>{v if isinstance(v, str) else json.dumps(v)}</parameter>" for k, v in arguments.items()
            ]
            text += "\n".join([f"\n\n<function={call['function']['name']}>", *rendered, "</function>"])
        converted.append({"role": message["role"], "content": text})
    return converted


def _as_published(run: Path, out: Path) -> Path:
    """`run`'s last completion per instance as trajs/<id>/<model>_<time>.json (text calls; every
    other one with fncall_messages too), results.json from the eval summary; no patches, no logs."""
    verdicts = read_summary(run / SUMMARY)
    (out / "results").mkdir(parents=True)
    (out / "results" / "results.json").write_text(
        json.dumps(
            {
                "resolved": sorted(i for i, s in verdicts.items() if s == "resolved"),
                "no_generation": sorted(i for i, s in verdicts.items() if s == "empty patch"),
            }
        )
    )
    for number, folder in enumerate(sorted((run / "llm_completions").iterdir())):
        completion = json.loads(latest_completion(list(folder.glob("*.json"))).read_text())
        final = completion["response"]["choices"][0]["message"]
        document = {
            "messages": _text_form(completion["messages"]),
            "response": {"choices": [{"message": _text_form([final])[0]}]},
            "kwargs": {},
        }
        if number % 2 == 0:
            document |= {"fncall_messages": completion["messages"], "fncall_response": completion["response"]}
        when = datetime.fromtimestamp(completion["timestamp"], UTC).strftime("%Y-%m-%dT%H:%M:%S")
        (out / "trajs" / folder.name).mkdir(parents=True)
        (out / "trajs" / folder.name / f"claude-3-5-sonnet-20241022_{when}.json").write_text(json.dumps(document))
    return out


def test_the_real_openhands_run_as_published_is_labelled_from_its_actions(openhands_run: Path, tmp_path: Path) -> None:
    read = {t.task_id: t for t in ingest_paths([openhands_run]).trajectories}
    native = {instance: detect(t) for instance, t in read.items()}
    result = ingest_paths([_as_published(openhands_run, tmp_path / "20241204_openhands")])  # nothing skipped
    trajectories = {t.task_id: t for t in result.trajectories}
    assert len(trajectories) == len(native) == 50 and sum(t.success for t in trajectories.values()) == 26
    agreeing = dict.fromkeys(CAPABILITIES, 0)
    for instance, trajectory in trajectories.items():
        assert trajectory.diagnostics["patch"] is None or instance == "django__django-11265"  # no_generation
        assert _calls(trajectory) == _calls(read[instance]), instance  # the text calls read as the native ones
        verdicts = detect(trajectory)
        if trajectory.success:
            assert verdicts["patch_production"].value == P, instance
        for name in CAPABILITIES:
            agreeing[name] += verdicts[name].value == native[instance][name].value
    # the actions alone give the labels the patch and its harness report give (no logs: no failing tests)
    assert all(agreeing[name] >= 45 for name in CAPABILITIES if name != "fault_localisation"), agreeing


def _calls(trajectory: Trajectory) -> list[tuple[str, object, object]]:
    return [
        (c.name, c.arguments.get("command"), c.arguments.get("path")) for m in trajectory.messages for c in m.tool_calls
    ]


def test_no_resolved_real_instance_lacks_a_patch(shared_data: Path) -> None:
    folder = shared_data / "swebench"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    trajectories = ingest_paths([folder]).trajectories
    assert len(trajectories) == 100 and sum(t.success for t in trajectories) == 59
    assert all(detect(t)["patch_production"].value == P for t in trajectories if t.success)
