"""Deterministic detectors for SWE-bench trajectories: the harness verdict plus the agent's commands.

Signals (contract.md keys): `diagnostics.patch`, `patch_exists`, `patch_successfully_applied`,
`tests_status` (FAIL_TO_PASS / PASS_TO_PASS success and failure lists), `exit_status`, and an
optional `diagnostics.gold_patch` (the reference fix, when the user supplies it). Commands come
from bash blocks in assistant text (mini-swe-agent) or from `execute_bash` / `str_replace_editor`
tool calls (OpenHands).
"""

from __future__ import annotations

import re
from typing import Iterator

from tracegym.analysis.detectors import Verdict, evidence
from tracegym.schema import Trajectory

_BASH_BLOCK = re.compile(r"```(?:bash|sh)\s*\n(.*?)```", re.DOTALL)
_EDIT = re.compile(r"\bsed\s+-i|\bperl\s+-[a-z]*i|\bgit\s+apply\b|\bpatch\s+-p|>\s*[\w./-]+\.py\b|\btee\s+[\w./-]+\.py\b"
                   r"|open\([^)]*['\"][wa]['\"]")
_TEST = re.compile(r"\bpytest\b|runtests\.py|\bunittest\b|\btox\b|\bpython3?\s+(?:-m\s+\S+|-c\b|[\w./-]+\.py\b)")
_EDITOR_WRITES = {"str_replace", "insert", "create", "undo_edit"}
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)
_SUBMIT = "COMPLETE_TASK_AND_SUBMIT"


def commands(trajectory: Trajectory) -> Iterator[tuple[int, str, str]]:
    """(message index, kind "edit" / "test" / "other", command text) for each agent action."""
    for index, message in enumerate(trajectory.messages):
        if message.role != "assistant":
            continue
        for block in _BASH_BLOCK.findall(message.content):
            yield index, _classify(block), block.strip()
        for call in message.tool_calls:
            if call.name == "str_replace_editor":
                kind = "edit" if call.arguments.get("command") in _EDITOR_WRITES else "other"
                yield index, kind, f"str_replace_editor {call.arguments.get('command')} {call.arguments.get('path', '')}"
            elif "command" in call.arguments and isinstance(call.arguments["command"], str):
                yield index, _classify(call.arguments["command"]), call.arguments["command"].strip()


def _classify(command: str) -> str:
    if _SUBMIT in command:
        return "other"
    if _EDIT.search(command):
        return "edit"
    return "test" if _TEST.search(command) else "other"


def patched_files(patch: str) -> list[str]:
    return _DIFF_FILE.findall(patch or "")


def detect(trajectory: Trajectory) -> dict[str, Verdict]:
    """Verdicts for the SWE capabilities of the catalogue."""
    diagnostics = trajectory.diagnostics
    return {
        "patch_production": _patch(diagnostics),
        "semantic_logic_precision": _tests(diagnostics, "FAIL_TO_PASS", "still failing after the patch"),
        "regression_avoidance": _tests(diagnostics, "PASS_TO_PASS", "broken by the patch"),
        "test_verification": _verification(trajectory),
        "fault_localisation": _localisation(diagnostics),
    }


def _applied(diagnostics: dict) -> bool:
    return bool((diagnostics.get("patch") or "").strip()) and diagnostics.get("patch_successfully_applied") is not False


def _patch(diagnostics: dict) -> Verdict:
    patch = (diagnostics.get("patch") or "").strip()
    status = diagnostics.get("exit_status")
    if not patch or diagnostics.get("patch_exists") is False:
        return Verdict.lacking([evidence(None, f"harness: empty patch (patch_exists false); agent exit_status: {status}")])
    if diagnostics.get("patch_successfully_applied") is False:
        return Verdict.lacking([evidence(None, f"harness: patch_successfully_applied false; patch starts: {patch[:160]}")])
    return Verdict.present([evidence(None, f"patch applied: {', '.join(patched_files(patch))}")])


def _tests(diagnostics: dict, group: str, what: str) -> Verdict:
    status = (diagnostics.get("tests_status") or {}).get(group)
    if not _applied(diagnostics) or not status:
        return Verdict.na()
    failing = status.get("failure") or []
    if failing:
        return Verdict.lacking([evidence(None, f"harness report: {group} {what}: {', '.join(failing[:5])}")])
    passing = status.get("success") or []
    return Verdict.present([evidence(None, f"harness report: {group} all {len(passing)} passing")])


def _verification(trajectory: Trajectory) -> Verdict:
    actions = list(commands(trajectory))
    edits = [(i, c) for i, kind, c in actions if kind == "edit"]
    if not edits:
        return Verdict.na()
    last_edit, edit_command = edits[-1]
    tests = [(i, c) for i, kind, c in actions if kind == "test" and i > last_edit]
    if tests:
        return Verdict.present([evidence(tests[0][0], f"ran after the last edit: {tests[0][1]}")])
    return Verdict.lacking([evidence(last_edit, f"no test or reproduction run after the last edit: {edit_command}")])


def _localisation(diagnostics: dict) -> Verdict:
    gold = set(patched_files(diagnostics.get("gold_patch") or ""))
    edited = [f for f in patched_files(diagnostics.get("patch") or "") if not re.search(r"(^|/)tests?(/|_)", f)]
    if not gold or not edited:
        return Verdict.na()
    outside = [f for f in edited if f not in gold]
    if outside:
        return Verdict.lacking([evidence(None, f"patch edits {', '.join(outside)}; the gold fix edits {', '.join(sorted(gold))}")])
    return Verdict.present([evidence(None, f"patch edits gold files: {', '.join(sorted(gold.intersection(edited)))}")])
