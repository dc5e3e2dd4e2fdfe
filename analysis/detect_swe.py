"""Deterministic detectors for SWE-bench trajectories: the agent's commands and its patch, read
against the tests that reproduce the issue. None of them is a function of the verdict alone: each
can hold for a resolved run and fail for an unresolved one.

- patch_production: the run ended with a patch that applies (harness `patch_exists`,
  `patch_successfully_applied`, or the submission itself); a resolved run always has one. With no
  record of the patch (`diagnostics.patch` None: unknown, not empty) it is present when the harness
  applied one, else it comes from the actions: present when the agent edited repository files,
  lacking when it edited none;
- fault_localisation: the patch (unknown: the files the actions left edited) edits source files the
  issue's tests exercise: files of the reference fix when one is supplied
  (`diagnostics.gold_patch`), else files whose path shares a name with the FAIL_TO_PASS tests'
  modules or with the code the problem statement names;
- issue_reproduction: the agent ran the failing behaviour (a script or the tests) before its first
  repository edit;
- test_verification: it ran tests or a reproduction after its last edit, before submitting;
- edit_scope: the patch (unknown: what the actions left in the repository) holds only the change:
  no scratch files (new files at the repository root, reproduction or debug scripts) and no edits
  to build configuration.
Commands come from bash blocks in assistant text (mini-swe-agent, SWE-agent; SWE-agent's
`str_replace_editor CMD PATH`, `create PATH` and `edit N:M` lines included) or from `execute_bash` /
`str_replace_editor` tool calls (OpenHands). Paths are read relative to the repository: /testbed
(SWE-bench's images) or the `<uploaded_files>` folder of the first user message (OpenHands works
in a copy of /testbed there). Writes to scratch scripts the agent made (reproduce.py, test_*.py, ...
that the patch creates, or with no patch record that the actions create or that sit at the
repository root) are not repository edits, whether or not the patch holds them; a file the patch
changes is one, whatever its name (django/views/debug.py, django/test/testcases.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from tracegym.analysis.detectors import Verdict, evidence
from tracegym.schema import Message, Trajectory

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
_ROOT = re.compile(r"<uploaded_files>\s*(/\S*?)/?\s*</uploaded_files>")
_DEFAULT_ROOT = "/testbed"
_EDITOR_LINE = re.compile(r"^\s*str_replace_editor\s+(create|str_replace|insert|undo_edit)\s+(\S+)", re.MULTILINE)
_OPEN_LINE = re.compile(r"^\s*(open|create)\s+\"?([^\s\"]+\.\w+)", re.MULTILINE)
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?([^\n]*)\n.*?^\s*\1\s*$", re.DOTALL | re.MULTILINE)
_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")
_REDIRECT = re.compile(r"(?:[^\d&>]>>?|\btee\s+(?:-a\s+)?)\s*([A-Za-z_./][\w./-]*\.[A-Za-z]\w*)")
_SED_FILE = re.compile(r"\bsed\s+(?:-\w+\s+)*-i\S*\s+(?:-e\s+)?(?:'[^']*'|\"(?:[^\"\\]|\\.)*\"|\S+)\s+([^\s;&|]+)")
_RM = re.compile(r"(?:^|[;&|(]\s*)rm\s+((?:-\w+\s+)*)([^;&|\n]+)", re.MULTILINE)


def repository_roots(trajectory: Trajectory) -> tuple[str, ...]:
    """The repository's folders in the agent's machine: /testbed and the `<uploaded_files>` path of
    the first user message (OpenHands, SWE-agent) when there is one."""
    first = next((m.content for m in trajectory.messages if m.role == "user"), "")
    match = _ROOT.search(first)
    return (_DEFAULT_ROOT, match.group(1)) if match and match.group(1) != _DEFAULT_ROOT else (_DEFAULT_ROOT,)


def _relative(path: str, roots: tuple[str, ...]) -> str | None:
    """`path` relative to the repository; None for an absolute path outside every root."""
    path = path.strip("'\"")
    for root in roots:
        if path.startswith(root + "/"):
            return os.path.normpath(path[len(root) + 1 :])
    if path.startswith("/"):
        return None
    return os.path.normpath(path)


def _actions(message: Message) -> Iterator[str | dict]:
    """The actions of an assistant message, in order: its bash blocks, then its tool calls: the
    `command` argument (a string) of each shell call, the arguments (a dict) of each str_replace_editor call."""
    yield from _BASH_BLOCK.findall(message.content)
    for call in message.tool_calls:
        if call.name == "str_replace_editor":
            yield call.arguments
        elif isinstance(call.arguments.get("command"), str):
            yield call.arguments["command"]


def _scripts(message: Message) -> Iterator[str]:
    """The shell commands of an assistant message: its bash blocks and its tool calls' `command`
    arguments (str_replace_editor's subcommand excepted)."""
    return (action for action in _actions(message) if isinstance(action, str))


def commands(trajectory: Trajectory) -> Iterator[tuple[int, str, str]]:
    """(message index, kind "edit" / "test", command text) for each agent action that edits the
    repository or runs tests or code, in order; a command doing both yields "edit" then "test".

    A write is a repository edit when it touches a file of the submitted patch, or with no patch
    any file inside the repository; writes to scratch scripts the agent made (see `_Files`) never count.
    """
    files = _Files.of(trajectory)
    for index, message in enumerate(trajectory.messages):
        if message.role != "assistant":
            continue
        for action in _actions(message):
            if isinstance(action, str):
                for kind in _classify(action, files):
                    yield index, kind, action.strip()
            elif action.get("command") in _EDITOR_WRITES and files.is_repository_file(str(action.get("path", ""))):
                yield index, "edit", _editor_text(action)


@dataclass(frozen=True)
class _Files:
    """What a write must touch to be a repository edit: `submitted`, the patch's files (empty when
    the patch is unknown or empty), `created`, the files the agent made (those the patch creates,
    else those the actions create), and the repository's folders."""

    submitted: tuple[str, ...]
    created: frozenset[str]
    root: tuple[str, ...]

    @classmethod
    def of(cls, trajectory: Trajectory) -> _Files:
        patch = trajectory.diagnostics.get("patch") or ""
        submitted = patched_files(patch)
        if submitted:
            created = frozenset(_NEW_FILE.findall(patch))
        else:
            created = frozenset(w.path for w in writes(trajectory) if w.op == "create")
        return cls(tuple(submitted), created, repository_roots(trajectory))

    def is_repository_file(self, path: str) -> bool:
        """One of the patch's files, or (no patch) any inside the repository, but not a scratch
        script: a file with a scratch name (reproduce.py, debug_*.py, test_*.py, ...) that the agent
        made, or (no patch) that sits at the repository root. A file the patch changes always counts."""
        if self.submitted:
            name = next((f for f in self.submitted if path.endswith(f)), None)
        else:
            name = _relative(path, self.root)
        if name is None:
            return False
        made = name in self.created or (not self.submitted and "/" not in name)
        return not (made and _SCRATCH.search(name))


def _classify(command: str, files: _Files) -> list[str]:
    if _SUBMIT in command:
        return []
    in_place = _IN_PLACE.search(command) and (
        not files.submitted or any(f in command for f in files.submitted) or command.lstrip().startswith("edit")
    )
    editor = any(files.is_repository_file(path) for _, path in _EDITOR_LINE.findall(command))
    edits = in_place or editor or any(files.is_repository_file(f) for f in _WRITTEN.findall(command))
    return (["edit"] if edits else []) + (["test"] if _TEST.search(command) else [])


@dataclass(frozen=True)
class Write:
    """A file the agent created, changed or removed: message index, path relative to the
    repository root, operation ("create", "modify" or "remove") and the command's text."""

    index: int
    path: str
    op: str
    command: str


def writes(trajectory: Trajectory) -> list[Write]:
    """Every write inside the repository, in order: str_replace_editor calls and lines, SWE-agent
    `create` and `edit` (of the file last opened), shell redirections and `tee` (quoted text and
    here-document bodies left out), `sed -i` and `rm`. Paths outside the repository are left out."""
    root = repository_roots(trajectory)
    found: list[Write] = []
    opened = ""
    for index, message in enumerate(trajectory.messages):
        if message.role != "assistant":
            continue
        for action in _actions(message):
            if isinstance(action, dict) and action.get("command") in _EDITOR_WRITES:
                op = "create" if action["command"] == "create" else "modify"
                found.append(Write(index, str(action.get("path", "")), op, _editor_text(action)))
        for script in _scripts(message):
            for write in _shell_writes(index, script, opened):
                found.append(write)
            for _, path in _OPEN_LINE.findall(_unheredoc(script)):
                opened = path
    return [
        Write(w.index, relative, w.op, w.command)
        for w in found
        if w.path and (relative := _relative(w.path, root)) is not None
    ]


def _unheredoc(script: str) -> str:
    """`script` without the bodies of its here-documents (their text is data, not commands)."""
    return _HEREDOC.sub(lambda m: f"<<{m.group(1)}{m.group(2)}", script)


def _editor_text(arguments: dict) -> str:
    return f"str_replace_editor {arguments.get('command')} {arguments.get('path', '')}"


def _shell_writes(index: int, script: str, opened: str) -> Iterator[Write]:
    """The writes of one shell command (`opened`: the file SWE-agent's `edit` changes)."""
    text, lines = script.strip(), _unheredoc(script)
    for command, path in _EDITOR_LINE.findall(lines):
        yield Write(index, path, "create" if command == "create" else "modify", text)
    for command, path in _OPEN_LINE.findall(lines):
        if command == "create":
            yield Write(index, path, "create", text)
    if opened and re.search(r"^\s*edit\s+\d+:\d+", lines, re.MULTILINE):
        yield Write(index, opened, "modify", text)
    bare = _QUOTED.sub("''", lines)
    for path in _REDIRECT.findall(bare):
        yield Write(index, path, "create", text)
    for path in _SED_FILE.findall(script):
        yield Write(index, path, "modify", text)
    for _, paths in _RM.findall(bare):
        for path in paths.split():
            yield Write(index, path, "remove", text)


@dataclass(frozen=True)
class Left:
    """What the writes left in the repository: each path with the write that first touched it since
    it was last removed (a "create" when the agent made the file)."""

    files: dict[str, Write]

    def created(self) -> list[str]:
        return [f for f, w in self.files.items() if w.op == "create"]


def left_in_repository(trajectory: Trajectory) -> Left:
    """The files the actions changed and did not remove, each with the write that first touched it."""
    files: dict[str, Write] = {}
    for write in writes(trajectory):
        if write.op == "remove":
            files.pop(write.path, None)
        else:
            files.setdefault(write.path, write)
    return Left(files)


def patched_files(patch: str) -> list[str]:
    return _DIFF_FILE.findall(patch or "")


def detect(trajectory: Trajectory) -> dict[str, Verdict]:
    """Verdicts for the SWE capabilities of the catalogue."""
    actions = list(commands(trajectory))
    patch = trajectory.diagnostics.get("patch")
    left = None if isinstance(patch, str) else left_in_repository(trajectory)
    return {
        "patch_production": _patch(trajectory, actions),
        "fault_localisation": _localisation(trajectory, left),
        "issue_reproduction": _reproduction(actions),
        "test_verification": _verification(actions),
        "edit_scope": _scope(patch) if left is None else _scope_left(left),
    }


def _patch(trajectory: Trajectory, actions: list[tuple[int, str, str]]) -> Verdict:
    """From the verdict (resolved: a patch applied), the patch record, else the actions."""
    diagnostics = trajectory.diagnostics
    patch = diagnostics.get("patch")
    files = patched_files(patch or "")
    if diagnostics.get("resolved", trajectory.success):
        shown = f"; it edits {', '.join(files)}" if files else ""
        return Verdict.present([evidence(None, f"resolved: the harness applied its patch and the tests pass{shown}")])
    status = diagnostics.get("exit_status")
    ended = f"; agent exit_status: {status}" if status else ""
    empty = isinstance(patch, str) and not patch.strip()
    if empty or diagnostics.get("patch_exists") is False:
        source = diagnostics.get("patch_source") if empty else None
        where = source or ("harness: patch_exists false" if diagnostics.get("patch_exists") is False else "submission")
        return Verdict.lacking([evidence(None, f"empty patch ({where}){ended}")])
    if diagnostics.get("patch_successfully_applied") is False:
        return Verdict.lacking(
            [evidence(None, f"harness: patch_successfully_applied false; patch starts: {(patch or '')[:160]}")]
        )
    if isinstance(patch, str):
        graded = (
            "applied" if diagnostics.get("patch_successfully_applied") else "submitted (applying it is not recorded)"
        )
        return Verdict.present([evidence(None, f"patch {graded}: {', '.join(files)}")])
    if diagnostics.get("patch_successfully_applied"):
        return Verdict.present([evidence(None, "harness: patch_successfully_applied true (the patch is not recorded)")])
    edits = [action for action in actions if action[1] == "edit"]
    if edits:
        index, _, command = edits[-1]
        return Verdict.present([evidence(index, f"no patch record; last repository edit: {command}")])
    turns = sum(m.role == "assistant" for m in trajectory.messages)
    if not turns:
        return Verdict.na()  # no patch record and no actions: nothing to read it from
    return Verdict.lacking(
        [evidence(None, f"no patch record and no repository file edited in {turns} turn{'s' * (turns != 1)}{ended}")]
    )


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


def _localisation(trajectory: Trajectory, left: Left | None) -> Verdict:
    """The edited source files (the patch's, else those the actions left changed) against the
    reference fix or the names of the failing tests and the issue."""
    diagnostics = trajectory.diagnostics
    if left is None:
        changed, subject = patched_files(diagnostics.get("patch") or ""), "patch edits"
    else:
        changed = [f for f, w in left.files.items() if not (w.op == "create" and _is_scratch(f))]
        subject = "the actions (no patch record) edit"
    edited = [f for f in changed if not _TEST_PATH.search(f) and f.endswith(".py")]
    gold = set(patched_files(diagnostics.get("gold_patch") or ""))
    if not edited:
        return Verdict.na()
    if gold:
        outside = [f for f in edited if f not in gold]
        if outside:
            return Verdict.lacking(
                [evidence(None, f"{subject} {', '.join(outside)}; the reference fix edits {', '.join(sorted(gold))}")]
            )
        return Verdict.present(
            [evidence(None, f"{subject} the reference fix's files: {', '.join(sorted(gold.intersection(edited)))}")]
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
                    f"{subject} {', '.join(f for f in edited if hits[f])}, named like the "
                    f"issue's tests or code ({', '.join(shared[:6])})",
                )
            ]
        )
    return Verdict.lacking(
        [
            evidence(
                None,
                f"{subject} {', '.join(edited)}, none named like the failing tests "
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
    scratch = [f for f in files if f in new and _is_scratch(f)]
    build = [f for f in files if _BUILD_FILES.search(f)]
    if scratch or build:
        parts = ([f"scratch files left in the patch: {', '.join(scratch)}"] if scratch else []) + (
            [f"build configuration edited: {', '.join(build)}"] if build else []
        )
        return Verdict.lacking([evidence(None, "; ".join(parts))])
    return Verdict.present([evidence(None, f"patch limited to {', '.join(files)}")])


def _is_scratch(path: str) -> bool:
    """A new file that is scratch: at the repository root, or a reproduction / debug script
    outside a tests folder."""
    return "/" not in path or bool(_SCRATCH.search(path) and not _TEST_PATH.search(path.rsplit("/", 1)[0] + "/"))


def _scope_left(left: Left) -> Verdict:
    """Edit scope when the patch is unknown: what the actions left changed in the repository."""
    if not left.files:
        return Verdict.na()
    scratch = [left.files[f] for f in left.created() if _is_scratch(f)]
    build = [w for f, w in left.files.items() if _BUILD_FILES.search(f)]
    if scratch or build:
        return Verdict.lacking(
            [
                evidence(w.index, f"left {w.path} in the repository (created, never removed): {w.command}")
                for w in scratch
            ]
            + [evidence(w.index, f"build configuration edited: {w.command}") for w in build]
        )
    return Verdict.present(
        [evidence(None, f"the actions (no patch record) leave only {', '.join(left.files)} changed")]
    )
