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
_IN_PLACE = re.compile(r"\bsed\s+-i|\bperl\s+-[a-z]*i|\bgit\s+apply\b|\bpatch\s+-p")
_WRITTEN = re.compile(r"(?:>|\btee\s+(?:-a\s+)?|open\(\s*['\"])\s*([\w./-]+\.py)\b")
_SCRATCH = re.compile(r"(^|/)(repro\w*|test_?\w*|check\w*|debug\w*|verify\w*|script\w*|demo\w*)\.py$")
_TEST = re.compile(r"\bpytest\b|runtests\.py|\bunittest\b|\btox\b|\bpython3?\s+(?:-m\s+\S+|-c\b|[\w./-]+\.py\b)")
_EDITOR_WRITES = {"str_replace", "insert", "create", "undo_edit"}
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)
_SUBMIT = "COMPLETE_TASK_AND_SUBMIT"


def commands(trajectory: Trajectory) -> Iterator[tuple[int, str, str]]:
    """(message index, kind "edit" / "test", command text) for each agent action that edits the
    repository or runs tests or code, in order; a command doing both yields "edit" then "test".

    A write is a repository edit when it touches a file of the submitted patch; with no patch,
    any write except to a scratch script (reproduce.py, test_*.py, ...) counts.
    """
    submitted = patched_files(trajectory.diagnostics.get("patch") or "")
    for index, message in enumerate(trajectory.messages):
        if message.role != "assistant":
            continue
        for block in _BASH_BLOCK.findall(message.content):
            for kind in _classify(block, submitted):
                yield index, kind, block.strip()
        for call in message.tool_calls:
            if call.name == "str_replace_editor":
                path = str(call.arguments.get("path", ""))
                if call.arguments.get("command") in _EDITOR_WRITES and _is_repository_file(path, submitted):
                    yield index, "edit", f"str_replace_editor {call.arguments.get('command')} {path}"
            elif isinstance(call.arguments.get("command"), str):
                for kind in _classify(call.arguments["command"], submitted):
                    yield index, kind, call.arguments["command"].strip()


def _is_repository_file(path: str, submitted: list[str]) -> bool:
    if submitted:
        return any(path.endswith(f) for f in submitted)
    return not _SCRATCH.search(path)


def _classify(command: str, submitted: list[str]) -> list[str]:
    if _SUBMIT in command:
        return []
    in_place = _IN_PLACE.search(command) and (not submitted or any(f in command for f in submitted))
    edits = in_place or any(_is_repository_file(f, submitted) for f in _WRITTEN.findall(command))
    return (["edit"] if edits else []) + (["test"] if _TEST.search(command) else [])


def patched_files(patch: str) -> list[str]:
    return _DIFF_FILE.findall(patch or "")


def detect(trajectory: Trajectory) -> dict[str, Verdict]:
    """Verdicts for the SWE capabilities of the catalogue."""
    diagnostics = trajectory.diagnostics
    return {
        "patch_production": _patch(diagnostics),
        "semantic_logic_precision": _tests(trajectory, "FAIL_TO_PASS", "still failing after the patch"),
        "regression_avoidance": _tests(trajectory, "PASS_TO_PASS", "broken by the patch"),
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


def _tests(trajectory: Trajectory, group: str, what: str) -> Verdict:
    """From the harness report, plus the agent's last repository edit as trajectory evidence."""
    diagnostics = trajectory.diagnostics
    status = (diagnostics.get("tests_status") or {}).get(group)
    if not _applied(diagnostics) or not status:
        return Verdict.na()
    failing = status.get("failure") or []
    if failing:
        found = [evidence(None, f"harness report: {group} {what}: {', '.join(failing[:5])}")]
        edits = [(index, command) for index, kind, command in commands(trajectory) if kind == "edit"]
        if edits:
            found.append(evidence(edits[-1][0], f"last edit before submitting: {edits[-1][1]}"))
        return Verdict.lacking(found)
    passing = status.get("success") or []
    return Verdict.present([evidence(None, f"harness report: {group} all {len(passing)} passing")])


def _verification(trajectory: Trajectory) -> Verdict:
    actions = list(commands(trajectory))
    edits = [position for position, (_, kind, _) in enumerate(actions) if kind == "edit"]
    if not edits:
        return Verdict.na()
    last_edit = edits[-1]
    tests = [actions[p] for p in range(last_edit + 1, len(actions)) if actions[p][1] == "test"]
    if tests:
        return Verdict.present([evidence(tests[0][0], f"ran after the last edit: {tests[0][2]}")])
    index, _, command = actions[last_edit]
    return Verdict.lacking([evidence(index, f"no test or reproduction run after the last edit: {command}")])


def _localisation(diagnostics: dict) -> Verdict:
    gold = set(patched_files(diagnostics.get("gold_patch") or ""))
    edited = [f for f in patched_files(diagnostics.get("patch") or "") if not re.search(r"(^|/)tests?(/|_)", f)]
    if not gold or not edited:
        return Verdict.na()
    outside = [f for f in edited if f not in gold]
    if outside:
        return Verdict.lacking([evidence(None, f"patch edits {', '.join(outside)}; the gold fix edits {', '.join(sorted(gold))}")])
    return Verdict.present([evidence(None, f"patch edits gold files: {', '.join(sorted(gold.intersection(edited)))}")])
