"""SWE-bench detectors on hand-built runs, the real two-run diagnosis, and `tracegym diagnose` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracegym.analysis.detect_swe import Write, commands, detect, left_in_repository, writes
from tracegym.analysis.diagnose import attach_gold_patches, diagnose
from tracegym.analysis.ingest import ingest_paths
from tracegym.cli import main
from tracegym.schema import LabelValue, Message, Source, ToolCall, Trajectory

P, L, N = LabelValue.PRESENT, LabelValue.LACKING, LabelValue.NA
PATCH = "diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n@@ -1 +1 @@\n-a\n+b\n"


def bash(text: str) -> Message:
    return Message(role="assistant", content=f"THOUGHT: go\n\n```bash\n{text}\n```")


def swe(
    messages: list[Message], patch: str | None = PATCH, resolved: bool = False, f2p_fail=(), p2p_fail=(), applied=True
) -> Trajectory:
    return Trajectory(
        id=f"run/{len(messages)}",
        task_id="pkg__pkg-1",
        source=Source(benchmark="swe-bench", format="mini_swe_agent", file="x"),
        messages=messages,
        reward=float(resolved),
        success=resolved,
        diagnostics={
            "resolved": resolved,
            "patch": patch,
            "patch_exists": None if patch is None else bool(patch),
            "patch_successfully_applied": None if patch is None else applied,  # no patch, no harness report
            "tests_status": {
                "FAIL_TO_PASS": {"success": [] if f2p_fail else ["t_new"], "failure": list(f2p_fail)},
                "PASS_TO_PASS": {"success": ["t_old"], "failure": list(p2p_fail)},
            },
            "exit_status": "Submitted",
        },
    )


def test_command_classification() -> None:
    trajectory = swe(
        [
            bash("cat <<'EOF' > reproduce_bug.py\nprint(1)\nEOF\npython reproduce_bug.py"),
            bash("sed -i 's/a/b/' pkg/core.py"),
            Message(
                role="assistant",
                tool_calls=[
                    ToolCall(
                        id="1",
                        name="str_replace_editor",
                        arguments={"command": "str_replace", "path": "/w/pkg/core.py"},
                    )
                ],
            ),
            Message(
                role="assistant",
                tool_calls=[
                    ToolCall(
                        id="3", name="str_replace_editor", arguments={"command": "create", "path": "/w/edge_cases.py"}
                    )
                ],
            ),
            Message(
                role="assistant",
                tool_calls=[ToolCall(id="2", name="execute_bash", arguments={"command": "pytest pkg/tests -q"})],
            ),
        ]
    )
    assert [(i, kind) for i, kind, _ in commands(trajectory)] == [(0, "test"), (1, "edit"), (2, "edit"), (4, "test")]


def test_reproduction_verification_and_scope_come_from_the_commands_and_the_patch() -> None:
    messages = [
        bash("sed -i 's/a/b/' pkg/core.py"),
        bash("python -m pytest pkg"),
        bash("sed -i 's/b/c/' pkg/core.py"),
        bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"),
    ]
    verdicts = detect(swe(messages, f2p_fail=["test_issue"]))
    assert verdicts["issue_reproduction"].value == L and verdicts["issue_reproduction"].evidence[0].message_index == 0
    assert verdicts["test_verification"].value == L and verdicts["test_verification"].evidence[0].message_index == 2
    assert verdicts["edit_scope"].value == P and verdicts["patch_production"].value == P
    careful = detect(
        swe([bash("python reproduce_bug.py"), bash("sed -i 's/a/b/' pkg/core.py"), bash("pytest pkg")], resolved=True)
    )
    assert careful["issue_reproduction"].value == P and careful["test_verification"].value == P
    assert careful["issue_reproduction"].evidence[0].message_index == 0
    # The same behaviour labels a resolved and an unresolved run alike: not a restatement of the verdict.
    assert {k: v.value for k, v in detect(swe(messages, resolved=True)).items()} == {
        k: v.value for k, v in verdicts.items()
    }
    scratch = (
        PATCH
        + "diff --git a/reproduce.py b/reproduce.py\nnew file mode 100644\n"
        + "--- /dev/null\n+++ b/reproduce.py\n@@ -0,0 +1 @@\n+x\n"
    )
    scope = detect(
        swe(messages, patch=scratch + "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n")
    )["edit_scope"]
    assert scope.value == L and "scratch files left in the patch: reproduce.py" in scope.evidence[0].quote
    assert "build configuration edited: setup.cfg" in scope.evidence[0].quote


def test_empty_or_unapplied_patch() -> None:
    empty = detect(swe([bash("ls")], patch=""))
    assert empty["patch_production"].value == L and "empty patch" in empty["patch_production"].evidence[0].quote
    assert empty["fault_localisation"].value == N and empty["edit_scope"].value == N
    assert detect(swe([bash("ls")], applied=False))["patch_production"].value == L


def test_writes_inside_the_repository_and_what_they_leave() -> None:
    task = Message(role="user", content="<uploaded_files>\n/workspace/r__r__1.0\n</uploaded_files>\nfix it")
    trajectory = swe(
        [
            task,
            bash("cat <<'EOF' > /workspace/r__r__1.0/repro.py\ncreate table x.y\nprint(1 > 0.5)\nEOF"),
            bash("python -c 'print(1 > 0.5)' > /tmp/out.txt 2>&1 && python repro.py"),
            bash("cd /testbed && sed -i 's/a/b/' pkg/core.py && rm -f repro.py"),
            bash("echo hi | tee -a notes.md"),
            bash("open pkg/x.py 10"),
            bash("edit 1:1\nx\nend_of_edit"),
        ],
        patch=None,
    )
    assert [(w.index, w.path, w.op) for w in writes(trajectory)] == [
        (1, "repro.py", "create"),  # the here-document's text is no command, /tmp is outside the repository
        (3, "pkg/core.py", "modify"),
        (3, "repro.py", "remove"),
        (4, "notes.md", "create"),
        (6, "pkg/x.py", "modify"),  # SWE-agent's edit changes the file last opened
    ]
    assert list(left_in_repository(trajectory).files) == ["pkg/core.py", "notes.md", "pkg/x.py"]
    assert isinstance(left_in_repository(trajectory).files["notes.md"], Write)
    verdicts = detect(trajectory)  # no patch record: every label from the actions
    assert verdicts["issue_reproduction"].value == P and verdicts["issue_reproduction"].evidence[0].message_index == 2
    assert verdicts["test_verification"].value == L
    scope = verdicts["edit_scope"]
    assert scope.value == L and scope.evidence[0].message_index == 4 and "left notes.md" in scope.evidence[0].quote
    assert verdicts["patch_production"].value == P and verdicts["patch_production"].evidence[0].message_index == 6
    nothing = detect(swe([task, bash("ls")], patch=None))["patch_production"]
    assert nothing.value == L and "no repository file edited in 1 turn" in nothing.evidence[0].quote
    assert detect(swe([task, bash("ls")], patch=None, resolved=True))["patch_production"].value == P
    assert detect(swe([], patch=None))["patch_production"].value == N  # no record, no actions: unknown


def test_a_scratch_script_in_the_patch_is_no_repository_edit() -> None:
    scratch = (
        PATCH + "diff --git a/reproduce.py b/reproduce.py\nnew file mode 100644\n--- /dev/null\n+++ b/reproduce.py\n"
    )
    messages = [
        bash("cat > reproduce.py <<'EOF'\nprint(1)\nEOF"),
        bash("python reproduce.py"),
        bash("sed -i 's/a/b/' pkg/core.py"),
    ]
    assert detect(swe(messages, patch=scratch))["issue_reproduction"].value == P


def test_a_repository_file_with_a_scratch_name_is_edited_when_the_patch_changes_it() -> None:
    debug = PATCH.replace("pkg/core.py", "django/views/debug.py")

    def editor(command: str, path: str) -> Message:
        return Message(
            role="assistant",
            tool_calls=[ToolCall(id=path, name="str_replace_editor", arguments={"command": command, "path": path})],
        )

    messages = [
        bash("python reproduce.py"),
        editor("str_replace", "/testbed/django/views/debug.py"),
        bash("python -m pytest tests/view_tests"),
    ]
    verdicts = detect(swe(messages, patch=debug))
    assert verdicts["issue_reproduction"].value == P and verdicts["test_verification"].value == P
    assert [kind for _, kind, _ in commands(swe(messages, patch=debug))] == ["test", "edit", "test"]
    # No patch record: a file the agent did not make counts, a scratch script it made (or one at the root) does not.
    checks = [editor("str_replace", "/testbed/django/contrib/admin/checks.py")]
    unknown = detect(swe(checks, patch=None))["patch_production"]
    assert unknown.value == P and "django/contrib/admin/checks.py" in unknown.evidence[0].quote
    made = [editor("create", "/testbed/tests/test_issue.py"), bash("echo 1 > debug_it.py"), bash("ls")]
    assert [kind for _, kind, _ in commands(swe(made, patch=None))] == []


def test_a_patch_the_harness_applied_was_produced_though_the_patch_is_not_recorded() -> None:
    trajectory = swe([bash("ls")], patch=None)
    trajectory.diagnostics["patch_successfully_applied"] = True
    verdict = detect(trajectory)["patch_production"]
    assert verdict.value == P and "patch_successfully_applied true" in verdict.evidence[0].quote


def test_localisation_from_the_failing_tests_or_the_gold_patch(tmp_path: Path) -> None:
    parser = PATCH.replace("pkg/core.py", "pkg/parser.py")
    near = swe([bash("ls")], patch=parser, f2p_fail=["pkg/tests/test_parser.py::test_issue"])
    assert detect(near)["fault_localisation"].value == P
    far = swe([bash("ls")], patch=parser, f2p_fail=["pkg/tests/test_render.py::test_issue"])
    verdict = detect(far)["fault_localisation"]
    assert (
        verdict.value == L
        and "none named like the failing tests (pkg/tests/test_render.py::test_issue)" in verdict.evidence[0].quote
    )
    django = swe(
        [bash("ls")],
        patch=PATCH.replace("pkg/core.py", "django/db/models/deletion.py"),
        f2p_fail=["test_fast_delete (delete.tests.FastDeleteTests)"],
    )
    assert detect(django)["fault_localisation"].value == P  # "delete" names deletion.py
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps({"pkg__pkg-1": PATCH.replace("pkg/core.py", "pkg/other.py")}))
    assert attach_gold_patches([near], gold) == 1
    verdict = detect(near)["fault_localisation"]
    assert verdict.value == L and "the reference fix edits pkg/other.py" in verdict.evidence[0].quote
    near.diagnostics["gold_patch"] = parser
    assert detect(near)["fault_localisation"].value == P


@pytest.fixture(scope="module")
def swebench(shared_data: Path) -> Path:
    folder = shared_data / "swebench"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    return folder


def test_two_swebench_runs_give_labels_that_are_not_the_verdict(swebench: Path) -> None:
    trajectories = ingest_paths([swebench]).trajectories
    assert len({t.source.agent for t in trajectories}) == 2
    diagnosis = diagnose(trajectories, [swebench])
    by_id = {t.id: t for t in trajectories}
    for name in ("fault_localisation", "issue_reproduction", "edit_scope"):
        outcomes = {
            (by_id[label.trajectory_id].success, label.value) for label in diagnosis.labels if label.capability == name
        }
        # held by resolved runs, lacked by unresolved ones
        assert (True, L) in outcomes and (False, P) in outcomes, name
    for label in diagnosis.labels:
        trajectory = by_id[label.trajectory_id]
        for entry in label.evidence:
            if entry.message_index is not None and label.capability in ("issue_reproduction", "test_verification"):
                quoted = " ".join(entry.quote.split(": ", 1)[1].rstrip("…").split())
                said = [" ".join(c.split()) for i, _, c in commands(trajectory) if i == entry.message_index]
                assert any(c.startswith(quoted) for c in said), (quoted, said)
    stats = {s.capability.name: s for s in diagnosis.report.capabilities}
    assert all(s.delta_ci is not None for s in stats.values() if s.delta_mean is not None)


def test_cli_writes_report_and_rejects_bad_input(swebench: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "diag"
    assert main(["diagnose", str(swebench), "--out", str(out), "--bootstrap", "200"]) == 0
    report = json.loads((out / "capabilities.json").read_text())
    assert report["params"]["labeller"] == "deterministic" and len(report["capabilities"]) == 5
    markdown = (out / "report.md").read_text()
    assert "![coverage vs delta](coverage_delta.png)" in markdown and "## Reading the inputs" in markdown
    assert (out / "coverage_delta.png").read_bytes()[:4] == b"\x89PNG"
    assert "fault_localisation" in capsys.readouterr().out
    assert main(["diagnose", str(tmp_path / "missing"), "--out", str(out)]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["diagnose", str(swebench), "--out", str(out), "--k", "3"]) == 1
