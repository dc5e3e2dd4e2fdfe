"""Deterministic detectors for SWE-bench trajectories: the agent's commands and its patch, read
against the tests that reproduce the issue. None of them is a function of the verdict alone: each
can hold for a resolved run and fail for an unresolved one.

- patch_production: the run ended with a patch that applies (harness `patch_exists`,
  `patch_successfully_applied`, or the submission itself);
- fault_localisation: the patch edits source files the issue's tests exercise: files of the
  reference fix when one is supplied (`diagnostics.gold_patch`), else files whose path shares a
  name with the FAIL_TO_PASS tests' modules or with the code the problem statement names;
- issue_reproduction: the agent ran the failing behaviour (a script or the tests) before its first
  repository edit;
- test_verification: it ran tests or a reproduction after its last edit, before submitting;
- edit_scope: the patch holds only the change: no scratch files (new files at the repository
  root, reproduction or debug scripts) and no edits to build configuration.
Commands come from bash blocks in assistant text (mini-swe-agent, SWE-agent) or from
`execute_bash` / `str_replace_editor` tool calls (OpenHands).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from tracegym.analysis.detectors import Verdict, evidence
from tracegym.schema import Trajectory

_BASH_BLOCK = re.compile(r"```(?:bash|sh)\s*\n(.*?)```", re.DOTALL)
_IN_PLACE = re.compile(r"\bsed\s+-i|\bperl\s+-[a-z]*i|\bgit\s+apply\b|\bpatch\s+-p|^\s*edit\s+\d+:\d+", re.MULTILINE)
_WRITTEN = re.compile(r"(?:>|\btee\s+(?:-a\s+)?|open\(\s*['\"])\s*([\w./-]+\.py)\b")
_SCRATCH = re.compile(r"(^|/)(repro\w*|test_?\w*|check\w*|debug\w*|verify\w*|script\w*|demo\w*|scratch\w*)\.py$")
_TEST = re.compile(r"\bpytest\b|runtests\.py|\bunittest\b|\btox\b|\bpython3?\s+(?:-m\s+\S+|-c\b|[\w./-]+\.py\b)")
_EDITOR_WRITES = {"str_replace", "insert", "create", "undo_edit"}
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)
_NEW_FILE = re.compile(r"^diff --git a/(\S+) b/\S+\n(?:(?!diff --git).*\n)*?--- /dev/null", re.MULTILINE)
_BUILD_FILES = re.compile(
    r"(^|/)(pyproject\.toml|setup\.py|setup\.cfg|tox\.ini|requirements[\w.-]*\.txt|conftest\.py)$"
)
_TEST_PATH = re.compile(r"(^|/)tests?(/|_)|(^|/)test_\w+\.py$")
_DJANGO_TEST = re.compile(r"\(([\w.]+)\)\s*$")
_IDENTIFIER = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{3,}(?:\.[A-Za-z_][A-Za-z0-9_]*)*\b")
_GENERIC = {
    "test",
    "tests",
    "testing",
    "init",
    "main",
    "core",
    "base",
    "utils",
    "util",
    "django",
    "models",
    "model",
    "fields",
    "field",
    "regress",
    "regression",
    "self",
    "none",
    "true",
    "false",
    "return",
    "import",
    "from",
    "class",
    "def",
    "with",
    "this",
    "that",
    "when",
    "should",
    "value",
    "error",
    "python",
    "file",
}
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
    in_place = _IN_PLACE.search(command) and (
        not submitted or any(f in command for f in submitted) or command.lstrip().startswith("edit")
    )
    edits = in_place or any(_is_repository_file(f, submitted) for f in _WRITTEN.findall(command))
    return (["edit"] if edits else []) + (["test"] if _TEST.search(command) else [])


def patched_files(patch: str) -> list[str]:
    return _DIFF_FILE.findall(patch or "")


def detect(trajectory: Trajectory) -> dict[str, Verdict]:
    """Verdicts for the SWE capabilities of the catalogue."""
    actions = list(commands(trajectory))
    return {
        "patch_production": _patch(trajectory.diagnostics),
        "fault_localisation": _localisation(trajectory),
        "issue_reproduction": _reproduction(actions),
        "test_verification": _verification(actions),
        "edit_scope": _scope(trajectory.diagnostics.get("patch") or ""),
    }


def _patch(diagnostics: dict) -> Verdict:
    patch = (diagnostics.get("patch") or "").strip()
    status = diagnostics.get("exit_status")
    if not patch or diagnostics.get("patch_exists") is False:
        return Verdict.lacking(
            [evidence(None, f"harness: empty patch (patch_exists false); agent exit_status: {status}")]
        )
    if diagnostics.get("patch_successfully_applied") is False:
        return Verdict.lacking(
            [evidence(None, f"harness: patch_successfully_applied false; patch starts: {patch[:160]}")]
        )
    return Verdict.present([evidence(None, f"patch applied: {', '.join(patched_files(patch))}")])


def _words(text: str) -> set[str]:
    """Lower-case name parts of a path or dotted name, generic ones dropped, plurals cut."""
    words = set()
    for part in re.split(r"[/._\-\s]+", text.lower()):
        part = re.sub(r"(ies)$", "y", part) if len(part) > 4 else part
        part = part[:-1] if len(part) > 4 and part.endswith("s") and not part.endswith("ss") else part
        if len(part) >= 4 and part not in _GENERIC and not part.isdigit():
            words.add(part)
    return words


def _related(a: set[str], b: set[str]) -> set[str]:
    """Words of `a` equal to a word of `b` or sharing its first five letters ("delete", "deletion")."""
    return {x for x in a for y in b if x == y or len(os.path.commonprefix([x, y])) >= 5}


def exercised(tests: list[str]) -> set[str]:
    """The names the issue's tests point at: their module path without the package root."""
    words: set[str] = set()
    for test in tests:
        django = _DJANGO_TEST.search(test)
        path = django.group(1) if django else test.split("::")[0]
        parts = re.split(r"[/.]", path)
        if not django and len(parts) > 2:
            parts = parts[1:]  # "astropy/io/fits/tests/test_card.py": the package root names everything
        words |= _words(" ".join(p for p in parts if not p[:1].isupper()))
    return words


def _localisation(trajectory: Trajectory) -> Verdict:
    diagnostics = trajectory.diagnostics
    edited = [
        f for f in patched_files(diagnostics.get("patch") or "") if not _TEST_PATH.search(f) and f.endswith(".py")
    ]
    gold = set(patched_files(diagnostics.get("gold_patch") or ""))
    if not edited:
        return Verdict.na()
    if gold:
        outside = [f for f in edited if f not in gold]
        if outside:
            return Verdict.lacking(
                [evidence(None, f"patch edits {', '.join(outside)}; the reference fix edits {', '.join(sorted(gold))}")]
            )
        return Verdict.present(
            [evidence(None, f"patch edits the reference fix's files: {', '.join(sorted(gold.intersection(edited)))}")]
        )
    group = (diagnostics.get("tests_status") or {}).get("FAIL_TO_PASS") or {}
    tests = list(group.get("success") or []) + list(group.get("failure") or [])
    if not tests:
        return Verdict.na()
    named = exercised(tests) | {
        w
        for name in _IDENTIFIER.findall(trajectory.metadata.get("problem_statement") or "")
        if "." in name or "_" in name or name[:1].isupper()
        for w in _words(name)
    }
    hits = {f: _related(_words("/".join(f.split("/")[1:])), named) for f in edited}
    if any(hits.values()):
        shared = sorted(set().union(*hits.values()))
        return Verdict.present(
            [
                evidence(
                    None,
                    f"patch edits {', '.join(f for f in edited if hits[f])}, named like the "
                    f"issue's tests or code ({', '.join(shared[:6])})",
                )
            ]
        )
    return Verdict.lacking(
        [
            evidence(
                None,
                f"patch edits {', '.join(edited)}, none named like the failing tests "
                f"({', '.join(tests[:3])}) or the code the issue names",
            )
        ]
    )


def _reproduction(actions: list[tuple[int, str, str]]) -> Verdict:
    edits = [position for position, (_, kind, _) in enumerate(actions) if kind == "edit"]
    if not edits:
        return Verdict.na()
    runs = [actions[p] for p in range(edits[0]) if actions[p][1] == "test"]
    if runs:
        return Verdict.present([evidence(runs[0][0], f"ran before the first edit: {runs[0][2]}")])
    index, _, command = actions[edits[0]]
    return Verdict.lacking([evidence(index, f"first edit with nothing run before it: {command}")])


def _verification(actions: list[tuple[int, str, str]]) -> Verdict:
    edits = [position for position, (_, kind, _) in enumerate(actions) if kind == "edit"]
    if not edits:
        return Verdict.na()
    last_edit = edits[-1]
    tests = [actions[p] for p in range(last_edit + 1, len(actions)) if actions[p][1] == "test"]
    if tests:
        return Verdict.present([evidence(tests[0][0], f"ran after the last edit: {tests[0][2]}")])
    index, _, command = actions[last_edit]
    return Verdict.lacking([evidence(index, f"no test or reproduction run after the last edit: {command}")])


def _scope(patch: str) -> Verdict:
    files = patched_files(patch)
    if not files:
        return Verdict.na()
    new = set(_NEW_FILE.findall(patch))
    scratch = [
        f
        for f in files
        if f in new and ("/" not in f or (_SCRATCH.search(f) and not _TEST_PATH.search(f.rsplit("/", 1)[0] + "/")))
    ]
    build = [f for f in files if _BUILD_FILES.search(f)]
    if scratch or build:
        parts = ([f"scratch files left in the patch: {', '.join(scratch)}"] if scratch else []) + (
            [f"build configuration edited: {', '.join(build)}"] if build else []
        )
        return Verdict.lacking([evidence(None, "; ".join(parts))])
    return Verdict.present([evidence(None, f"patch limited to {', '.join(files)}")])
