"""SWE-bench detectors on hand-built runs, the real two-run diagnosis, and `tracegym diagnose` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracegym.analysis.detect_swe import commands, detect
from tracegym.analysis.diagnose import attach_gold_patches, diagnose
from tracegym.analysis.ingest import ingest_paths
from tracegym.cli import main
from tracegym.schema import LabelValue, Message, Source, ToolCall, Trajectory

P, L, N = LabelValue.PRESENT, LabelValue.LACKING, LabelValue.NA
PATCH = "diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n@@ -1 +1 @@\n-a\n+b\n"


def bash(text: str) -> Message:
    return Message(role="assistant", content=f"THOUGHT: go\n\n```bash\n{text}\n```")


def swe(messages: list[Message], patch: str = PATCH, resolved: bool = False, f2p_fail=(), p2p_fail=(), applied=True) -> Trajectory:
    return Trajectory(
        id=f"run/{len(messages)}", task_id="pkg__pkg-1", source=Source(benchmark="swe-bench", format="mini_swe_agent", file="x"),
        messages=messages, reward=float(resolved), success=resolved,
        diagnostics={"resolved": resolved, "patch": patch, "patch_exists": bool(patch), "patch_successfully_applied": applied,
                     "tests_status": {"FAIL_TO_PASS": {"success": [] if f2p_fail else ["t_new"], "failure": list(f2p_fail)},
                                      "PASS_TO_PASS": {"success": ["t_old"], "failure": list(p2p_fail)}},
                     "exit_status": "Submitted"})


def test_command_classification() -> None:
    trajectory = swe([
        bash("cat <<'EOF' > reproduce_bug.py\nprint(1)\nEOF\npython reproduce_bug.py"),
        bash("sed -i 's/a/b/' pkg/core.py"),
        Message(role="assistant", tool_calls=[ToolCall(id="1", name="str_replace_editor",
                                                       arguments={"command": "str_replace", "path": "/w/pkg/core.py"})]),
        Message(role="assistant", tool_calls=[ToolCall(id="3", name="str_replace_editor",
                                                       arguments={"command": "create", "path": "/w/edge_cases.py"})]),
        Message(role="assistant", tool_calls=[ToolCall(id="2", name="execute_bash", arguments={"command": "pytest pkg/tests -q"})]),
    ])
    assert [(i, kind) for i, kind, _ in commands(trajectory)] == [(0, "test"), (1, "edit"), (2, "edit"), (4, "test")]


def test_failing_tests_and_unverified_edit() -> None:
    messages = [bash("python -m pytest pkg"), bash("sed -i 's/a/b/' pkg/core.py"),
                bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached")]
    verdicts = detect(swe(messages, f2p_fail=["test_issue"], p2p_fail=["test_old"]))
    assert verdicts["semantic_logic_precision"].value == L
    assert "FAIL_TO_PASS still failing after the patch: test_issue" in verdicts["semantic_logic_precision"].evidence[0].quote
    assert verdicts["semantic_logic_precision"].evidence[1].message_index == 1
    assert verdicts["regression_avoidance"].value == L
    assert verdicts["test_verification"].value == L and verdicts["test_verification"].evidence[0].message_index == 1
    assert verdicts["patch_production"].value == P and verdicts["fault_localisation"].value == N
    resolved = detect(swe([bash("sed -i 's/a/b/' pkg/core.py"), bash("pytest pkg")], resolved=True))
    assert {k: v.value for k, v in resolved.items()} == {
        "patch_production": P, "semantic_logic_precision": P, "regression_avoidance": P, "test_verification": P,
        "fault_localisation": N}


def test_empty_or_unapplied_patch() -> None:
    empty = detect(swe([bash("ls")], patch=""))
    assert empty["patch_production"].value == L and "empty patch" in empty["patch_production"].evidence[0].quote
    assert empty["semantic_logic_precision"].value == N
    assert detect(swe([bash("ls")], applied=False))["patch_production"].value == L


def test_localisation_needs_the_gold_patch(tmp_path: Path) -> None:
    trajectory = swe([bash("ls")])
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps({"pkg__pkg-1": PATCH.replace("pkg/core.py", "pkg/other.py")}))
    assert attach_gold_patches([trajectory], gold) == 1
    verdict = detect(trajectory)["fault_localisation"]
    assert verdict.value == L and "the gold fix edits pkg/other.py" in verdict.evidence[0].quote
    trajectory.diagnostics["gold_patch"] = PATCH
    assert detect(trajectory)["fault_localisation"].value == P


@pytest.fixture(scope="module")
def swebench(shared_data: Path) -> Path:
    folder = shared_data / "swebench"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    return folder


def test_two_swebench_runs_give_a_selection_with_quoted_evidence(swebench: Path) -> None:
    trajectories = ingest_paths([swebench]).trajectories
    assert len({t.source.agent for t in trajectories}) == 2
    report = diagnose(trajectories, [swebench]).report
    assert report.selected
    quotes = [e for name in report.selected for s in report.capabilities if s.capability.name == name
              for item in s.explained_failures for e in item["evidence"]]
    from_harness = [e for e in quotes if e["message_index"] is None and e["quote"].startswith("harness report:")]
    from_trajectory = [e for e in quotes if e["message_index"] is not None]
    assert from_harness and from_trajectory
    by_id = {t.id: t for t in trajectories}
    for name in report.selected:
        stats = next(s for s in report.capabilities if s.capability.name == name)
        for item in stats.explained_failures:
            trajectory = by_id[item["trajectory_id"]]
            assert not trajectory.success
            for entry in item["evidence"]:
                if entry["message_index"] is not None:  # the quote is the trajectory's own command
                    quoted = " ".join(entry["quote"].split(": ", 1)[1].rstrip("…").split())
                    said = [" ".join(c.split()) for i, _, c in commands(trajectory) if i == entry["message_index"]]
                    assert any(c.startswith(quoted) for c in said), (quoted, said)


def test_cli_writes_report_and_rejects_bad_input(swebench: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "diag"
    assert main(["diagnose", str(swebench), "--out", str(out), "--bootstrap", "200"]) == 0
    report = json.loads((out / "capabilities.json").read_text())
    assert report["selected"] and report["params"]["labeller"] == "deterministic"
    markdown = (out / "report.md").read_text()
    assert "![coverage vs delta](coverage_delta.png)" in markdown and "harness report:" in markdown
    assert (out / "coverage_delta.png").read_bytes()[:4] == b"\x89PNG"
    assert "semantic_logic_precision" in capsys.readouterr().out
    assert main(["diagnose", str(tmp_path / "missing"), "--out", str(out)]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["diagnose", str(swebench), "--out", str(out), "--k", "3"]) == 1
