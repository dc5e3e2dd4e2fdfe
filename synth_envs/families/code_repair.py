"""Code repair (SWE-style): find and fix a seeded bug in a generated Python module.

A module of several small utility functions (names and constants drawn per seed) ships with a
pytest suite computed from the correct implementation; one function carries a plausible bug
(an off-by-one, a flipped comparison, a wrong operand) that makes its target test fail. The
agent reads files, edits them with exact-substring replacements and may run the tests (in the
sandbox, `tracegym.synth_envs.sandbox`).

Grading never runs the agent's files as tests. The sandbox calls the module's functions on the
inputs of the visible tests and on `HIDDEN_PER_FUNCTION` hidden inputs per function (drawn from
their own seed, never shown; the buggy function's are inputs its bug gets wrong, so an episode
whose bug shows on none of `HIDDEN_DRAWS` draws is regenerated), and the values come back as
plain data compared outside with expected values computed from the correct module: a special
case for the visible test, an object whose `__eq__` always agrees or a forged report earns
nothing. Reward, for an edited
module whose run is clean: 0.4 the target is fixed (its test and the buggy function's hidden
cases pass) + 0.4 nothing regressed (every case that passed before still passes; counted only
with the target) + 0.1 minimal edit (target fixed, at most 2 changed lines more than the
reference fix) + 0.1 format (a final answer, no malformed calls). An unedited module earns the
format reward only; edited tests, any sandbox violation, a timeout, a crash or a memory/output
overrun earn 0 with the reason. Knobs: functions in the module, tests per function. The prompt is
the same at every setting; `list_files` and `run_tests` are offered though the oracle needs
neither (an agent may look around and test its fix).
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from tracegym.synth_envs import sandbox
from tracegym.synth_envs.base import Environment, ToolError
from tracegym.synth_envs.common import call
from tracegym.synth_envs.registry import register
from tracegym.synth_envs.tools import tool

RepoFile = Literal["utils.py", "test_utils.py"]
MODULE, TESTS = get_args(RepoFile)
HIDDEN_PER_FUNCTION = 3  # graded inputs per function that the agent never sees
HIDDEN_DRAWS = 40  # inputs drawn at most to find the buggy function's hidden cases, each one its bug gets wrong


@dataclass(frozen=True)
class _Template:
    source: str  # `{name}` is replaced by the function's name
    bugs: tuple[tuple[str, str], ...]  # (correct text, buggy text), each must occur once
    inputs: Callable[[random.Random], tuple]


def _ints(rng: random.Random, n: int, low: int = -20, high: int = 50) -> list[int]:
    return [rng.randrange(low, high) for _ in range(n)]


TEMPLATES: tuple[_Template, ...] = (
    _Template(
        "def {name}(x, lo, hi):\n    return max(lo, min(x, hi))\n",
        (("min(x, hi)", "min(x, lo)"), ("max(lo, min(x, hi))", "min(lo, max(x, hi))")),
        lambda r: (r.randrange(-50, 50), r.randrange(-20, 0), r.randrange(1, 20)),
    ),
    _Template(
        "def {name}(values, k):\n    out = []\n    for i in range(len(values) - k + 1):\n"
        "        out.append(sum(values[i:i + k]) / k)\n    return out\n",
        (("len(values) - k + 1", "len(values) - k"), ("values[i:i + k]", "values[i:i + k - 1]")),
        lambda r: (_ints(r, r.randrange(4, 9)), r.randrange(2, 4)),
    ),
    _Template(
        "def {name}(text):\n    counts = {{}}\n    for word in text.lower().split():\n"
        "        word = word.strip('.,!?')\n"
        "        if word:\n            counts[word] = counts.get(word, 0) + 1\n    return counts\n",
        (("text.lower().split()", "text.split()"), ("counts.get(word, 0) + 1", "counts.get(word, 1)")),
        lambda r: (
            " ".join(
                r.choice(["The", "the", "cat", "Cat.", "sat", "on", "mat!", "a", "A"])
                for _ in range(r.randrange(5, 10))
            ),
        ),
    ),
    _Template(
        "def {name}(values):\n    out, best = [], None\n    for v in values:\n        if best is None or v > best:\n"
        "            best = v\n        out.append(best)\n    return out\n",
        (("v > best", "v < best"), ("out.append(best)", "out.append(v)")),
        lambda r: (_ints(r, r.randrange(5, 9)),),
    ),
    _Template(
        "def {name}(items):\n    seen, out = set(), []\n    for item in items:\n        if item not in seen:\n"
        "            seen.add(item)\n            out.append(item)\n    return out\n",
        (("if item not in seen:", "if item not in out[-1:]:"),),
        lambda r: ([r.randrange(0, 5) for _ in range(r.randrange(6, 10))],),
    ),
    _Template(
        "def {name}(items, target):\n    lo, hi = 0, len(items) - 1\n    while lo <= hi:\n"
        "        mid = (lo + hi) // 2\n        if items[mid] == target:\n            return mid\n"
        "        if items[mid] < target:\n            lo = mid + 1\n"
        "        else:\n            hi = mid - 1\n    return -1\n",
        (("while lo <= hi:", "while lo < hi:"), ("lo, hi = 0, len(items) - 1", "lo, hi = 0, len(items) - 2")),
        lambda r: (lambda xs: (xs, r.choice(xs[-2:] + [xs[0], 999])))(sorted(set(_ints(r, 7)))),
    ),
    _Template(
        "def {name}(items, size):\n    return [items[i:i + size] for i in range(0, len(items), size)]\n",
        (
            ("range(0, len(items), size)", "range(0, len(items) - size, size)"),
            ("items[i:i + size]", "items[i:i + size - 1]"),
        ),
        lambda r: (_ints(r, r.randrange(5, 11)), r.randrange(2, 4)),
    ),
    _Template(
        "def {name}(intervals):\n    merged = []\n    for start, end in sorted(intervals):\n"
        "        if merged and start <= merged[-1][1]:\n            merged[-1][1] = max(merged[-1][1], end)\n"
        "        else:\n            merged.append([start, end])\n    return merged\n",
        (("start <= merged[-1][1]", "start < merged[-1][1]"), ("max(merged[-1][1], end)", "end")),
        lambda r: (
            [(lambda a: [a, a + r.randrange(0, 6)])(r.randrange(0, 20)) for _ in range(r.randrange(3, 6))]
            + [[3, 5], [5, 7], [1, 9], [2, 4]],
        ),
    ),
    _Template(
        "def {name}(text):\n    out = []\n    for ch in text:\n        if out and out[-1][0] == ch:\n"
        "            out[-1][1] += 1\n"
        "        else:\n            out.append([ch, 1])\n    return [(ch, n) for ch, n in out]\n",
        (("out[-1][1] += 1", "out[-1][1] = 2"),),
        lambda r: ("".join(r.choice("aab") * r.randrange(1, 5) for _ in range(r.randrange(3, 6))),),
    ),
    _Template(
        "def {name}(old, new):\n    return round((new - old) / old * 100, {digits})\n",
        (("(new - old) / old", "(new - old) / new"),),
        lambda r: (r.randrange(10, 200), r.randrange(10, 200)),
    ),
    _Template(
        "def {name}(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n",
        (("year % 100 != 0 or", "year % 100 != 0 and"),),
        lambda r: (r.choice([1900, 2000, 2024, 2023, 2100, 2400, r.randrange(1800, 2400)]),),
    ),
)
VERBS = ("compute", "build", "collect", "find", "make", "get", "calc", "derive")
NOUNS = ("clamp", "window", "tally", "peaks", "unique", "index", "chunks", "spans", "runs", "delta", "leap")


@dataclass
class Config:
    """Difficulty knobs: functions in the module (the bug hides in one), tests per function."""

    n_functions: int = 5
    tests_per_function: int = 2


@dataclass(frozen=True)
class _World:
    module: str
    buggy: str
    tests: str
    target: str
    passing_before: tuple[str, ...]  # visible tests and hidden cases the buggy module passes already
    fix: tuple[str, str]  # (buggy text, correct text) of the reference fix
    decoy: tuple[str, str]  # a plausible but wrong edit in another function
    cases: tuple[sandbox.Case, ...]  # every visible test and hidden input, graded outside the sandbox
    target_cases: tuple[str, ...]  # the target test and the buggy function's hidden cases


@dataclass
class _State:
    files: dict[str, str]  # path -> text as the agent's edits left it


def _load(source: str) -> dict[str, Any]:
    """The namespace of a generated module (our own template code, run in this process)."""
    namespace: dict[str, Any] = {}
    exec(compile(source, "<generated>", "exec"), namespace)
    return namespace


def _run(namespace: dict[str, Any], name: str, args: tuple) -> str:
    try:
        return repr(namespace[name](*args))
    except Exception as error:  # the buggy variant may raise; that is a failure, not an outcome
        return f"raises {type(error).__name__}"


def _hidden_cases(
    rng: random.Random,
    picked: list[int],
    names: list[str],
    buggy_name: str,
    correct: dict[str, Any],
    broken: dict[str, Any],
) -> list[sandbox.Case]:
    """`HIDDEN_PER_FUNCTION` graded inputs per function, never shown to the agent: for the buggy
    function, inputs its bug gets wrong (of at most `HIDDEN_DRAWS` draws); for the others, any
    input whose correct call returns (the buggy module passes those, as the functions are equal)."""
    cases = []
    for index, name in zip(picked, names):
        found = 0
        for _ in range(HIDDEN_DRAWS if name == buggy_name else HIDDEN_PER_FUNCTION):
            args = TEMPLATES[index].inputs(rng)
            literal, expected = repr(args), _run(correct, name, args)
            if expected.startswith("raises") or (name == buggy_name and _run(broken, name, args) == expected):
                continue
            found += 1
            cases.append(sandbox.Case(f"hidden_{name}_{found}", name, literal, expected))
            if found == HIDDEN_PER_FUNCTION:
                break
    return cases


@register
class CodeRepair(Environment):
    name = "code_repair"
    capability = "patch_production"
    description = (
        "Repairing code: reading source and tests, localising the faulty logic (off-by-one, wrong "
        "comparison or operand), and making a minimal, precise edit that makes the failing test pass "
        "without breaking the others."
    )
    Config = Config
    ladder = ({"n_functions": 2}, {"n_functions": 4}, {"n_functions": 6}, {"n_functions": 8}, {"n_functions": 11})
    max_turns = 10
    sandbox_config: ClassVar[sandbox.SandboxConfig] = sandbox.SandboxConfig()  # limits of every run
    runs_code = True
    instructions = (
        "You are a software engineer. A test in test_utils.py fails. Find the bug in utils.py and fix it "
        "with a minimal edit; do not change the tests. When done, reply with a one-line summary of the fix."
    )
    world: _World
    state: _State

    def _generate(self, seed: int) -> _World | None:
        """The module, its tests and the seeded bug; None when the bug breaks no test or its line is not unique."""
        cfg, rng = self.config, random.Random(seed)
        picked = rng.sample(range(len(TEMPLATES)), min(max(cfg.n_functions, 1), len(TEMPLATES)))
        names = [f"{rng.choice(VERBS)}_{NOUNS[i % len(NOUNS)]}_{rng.randrange(10, 99)}" for i in picked]
        parts = [TEMPLATES[i].source.format(name=n, digits=rng.randrange(1, 4)) for i, n in zip(picked, names)]
        module = '"""Small utilities (generated)."""\n\n\n' + "\n\n".join(parts)
        buggy_index = rng.randrange(len(picked))
        good, bad = rng.choice(TEMPLATES[picked[buggy_index]].bugs)
        buggy_part = parts[buggy_index].replace(good, bad, 1)
        buggy = module.replace(parts[buggy_index], buggy_part, 1)
        correct, broken = _load(module), _load(buggy)
        tests, target, passing, cases = [f"from utils import {', '.join(names)}\n"], None, [], []
        for index, name in zip(picked, names):
            for t in range(max(cfg.tests_per_function, 1)):
                args = TEMPLATES[index].inputs(rng)
                expected = _run(correct, name, args)
                if expected.startswith("raises"):
                    continue
                test_name = f"test_{name}_{t}"
                tests.append(f"\ndef {test_name}():\n    assert {name}(*{args!r}) == {expected}\n")
                cases.append(sandbox.Case(test_name, name, repr(args), expected))
                if _run(broken, name, args) == expected:
                    passing.append(test_name)
                elif target is None and name == names[buggy_index]:
                    target = test_name
        if target is None:
            return None
        good_line, bad_line = next(
            (g, b) for g, b in zip(parts[buggy_index].splitlines(), buggy_part.splitlines()) if g != b
        )
        if buggy.count(bad_line) != 1:
            return None
        other = (buggy_index + 1) % len(picked)
        decoy_good, decoy_bad = TEMPLATES[picked[other]].bugs[0]
        decoy = (decoy_good, decoy_bad) if buggy.count(decoy_good) == 1 else ("", "")
        hidden = _hidden_cases(
            random.Random(f"code_repair/hidden/{seed}"), picked, names, names[buggy_index], correct, broken
        )
        target_cases = [target] + [c.case for c in hidden if c.function == names[buggy_index]]
        if len(target_cases) == 1:
            return None
        passing += [c.case for c in hidden if c.function != names[buggy_index]]
        return _World(
            module,
            buggy,
            "".join(tests),
            target,
            tuple(passing),
            (bad_line, good_line),
            decoy,
            tuple(cases + hidden),
            tuple(target_cases),
        )

    def _task(self) -> str:
        return f"The test {self.world.target} fails. Please fix the bug."

    def _new_state(self) -> _State:
        return _State({MODULE: self.world.buggy, TESTS: self.world.tests})

    def _reject(self) -> str | None:
        if self.world is None:
            return "the seeded bug breaks no test or no hidden input, or its line is not unique"
        return None

    # -- tools ----------------------------------------------------------------------------------

    @tool
    def list_files(self) -> list[str]:
        """Files in the repository."""
        return sorted(self.state.files)

    @tool
    def read_file(self, path: RepoFile) -> str:
        """A file's text."""
        return self.state.files[path]

    @tool
    def replace_in_file(self, path: RepoFile, old: str, new: str) -> dict[str, Any]:
        """Replace the exact text `old` (which must occur exactly once) by `new`."""
        files = self.state.files
        count = files[path].count(old) if old else 0
        if count != 1:
            raise ToolError(f"`old` must occur exactly once in {path}, found {count} times")
        files[path] = files[path].replace(old, new, 1)
        return {"ok": True}

    @tool
    def run_tests(self) -> str:
        """Run the test suite in a sandbox; returns passes and failures."""
        return sandbox.run_tests(self.state.files, TESTS[:-3], self.sandbox_config).summary()

    # -- scoring and solutions ------------------------------------------------------------------

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        w, files = self.world, self.state.files
        if files[TESTS] != w.tests:
            return 0.0, {"edited": files[MODULE] != w.buggy, "stopped": "the tests were edited"}
        fmt = 0.1 * (bool(final_answer.strip()) and self.errors == 0)
        module = files[MODULE]
        if module == w.buggy:
            return round(fmt, 6), {"edited": False, "target": False, "regressions": None}
        result = sandbox.grade({MODULE: module}, MODULE[:-3], w.cases, self.sandbox_config)
        if not result.ok:
            return 0.0, {"edited": True, "stopped": result.reason}
        passed = set(result.passed)
        target = all(case in passed for case in w.target_cases)
        kept = target and all(case in passed for case in w.passing_before)
        changed = sum(
            1
            for line in difflib.unified_diff(w.buggy.splitlines(), module.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        )
        minimal = target and changed <= 4  # the reference fix is 2 diff lines (-1/+1); allow 2 more
        reward = 0.4 * target + 0.4 * kept + 0.1 * minimal + fmt
        return round(reward, 6), {"edited": True, "target": target, "no_regressions": kept, "changed_lines": changed}

    def _oracle(self) -> list[str]:
        bad, good = self.world.fix
        return [
            call("read_file", path=MODULE),
            call("replace_in_file", path=MODULE, old=bad, new=good),
            f"Fixed the bug: replaced `{bad.strip()}` with `{good.strip()}`.",
        ]

    def _wrong(self) -> list[list[str]]:
        bad, good = self.world.fix
        wrong = [
            [call("read_file", path=MODULE), "The code looks correct to me."],
            [
                call(
                    "replace_in_file",
                    path=TESTS,
                    old=f"def {self.world.target}():",
                    new=f"def _skipped_{self.world.target}():",
                ),
                "Done.",
            ],
        ]
        if self.world.decoy[0]:
            decoy_good, decoy_bad = self.world.decoy
            wrong.append([call("replace_in_file", path=MODULE, old=decoy_good, new=decoy_bad), "Fixed."])
        return wrong

    def _hint(self) -> str:
        return f"Look closely at the line `{self.world.fix[0].strip()}` in utils.py."
