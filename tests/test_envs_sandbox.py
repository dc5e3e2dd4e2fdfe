"""The code sandbox's mechanics: reports, grading from outside, limits, the view from inside, fail closed.

Attacks by submissions through the code-repair environment are in tests/test_hostile.py.
"""

from __future__ import annotations

import os
import sys

import pytest

from tracegym.synth_envs import sandbox
from tracegym.synth_envs.sandbox import Case, SandboxConfig, SandboxUnavailable, grade, run_tests

needs_sandbox = pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
)

TESTS = "from mod import f\n\ndef test_one():\n    assert f(1) == 2\n\ndef test_two():\n    assert f(2) == 3\n"
SHORT = SandboxConfig(timeout_s=3, cpu_s=6)  # CPU time above the wall clock: the timeout comes first


def _tests(body: str, config: SandboxConfig = SHORT) -> sandbox.SandboxResult:
    return run_tests({"mod.py": body, "test_mod.py": TESTS}, "test_mod", config)


def _inside(check: str) -> sandbox.SandboxResult:
    """Run `check` (a test body's statements) as a test in the sandbox."""
    body = "import os\n\ndef test_inside():\n" + "".join(f"    {line}\n" for line in check.splitlines())
    return run_tests({"test_inside.py": body}, "test_inside", SHORT)


@needs_sandbox
def test_a_clean_run_reports_each_test() -> None:
    result = _tests("def f(x):\n    return x + 1\n")
    assert result.ok and sorted(result.passed) == ["test_one", "test_two"] and not result.failed
    broken = _tests("def f(x):\n    return x + 2\n")
    assert broken.ok and sorted(broken.failed) == ["test_one", "test_two"]
    assert "AssertionError" in broken.failed["test_one"]


@needs_sandbox
def test_grading_compares_plain_values_outside() -> None:
    module = {"m.py": "def words(t):\n    return {w: len(w) for w in t.split()}\n\ndef kinds(t):\n    return set(t)\n"}
    cases = [
        Case("dict", "words", "('b a',)", "{'a': 1, 'b': 1}"),  # other insertion order, equal dict
        Case("set", "kinds", "('ab',)", "{'b', 'a'}"),  # set order depends on the string hash seed
        Case("wrong", "words", "('a',)", "{'a': 2}"),
        Case("raises", "words", "(5,)", "{}"),
    ]
    result = grade(module, "m", cases, SHORT)
    assert result.ok and result.passed == ["dict", "set"]
    assert result.failed["wrong"] == "returned {'a': 1}, expected {'a': 2}"
    assert result.failed["raises"].startswith("AttributeError")


@needs_sandbox
def test_values_that_are_not_plain_are_never_compared() -> None:
    cases = [Case("c", "f", "(1,)", "2")]
    for value in ("type('E', (), {'__eq__': lambda s, o: True})()", "type('I', (int,), {})(2)", "[2, object()]"):
        result = grade({"m.py": f"def f(x):\n    return {value}\n"}, "m", cases, SHORT)
        assert not result.ok and "not a plain value" in result.reason, value


@needs_sandbox
@pytest.mark.parametrize(
    "body, config, status, why",
    [
        ("def f(x):\n    while True:\n        pass\n", SHORT, "timeout", "killed after 3 s"),
        (
            "def f(x):\n    while True:\n        pass\n",
            SandboxConfig(timeout_s=10, cpu_s=1),
            "killed",
            "CPU time limit exceeded",
        ),
        ("def f(x):\n    block = bytearray(8 * 2**30)\n", SHORT, "ok", "memory limit"),
        (
            "import sys\ndef f(x):\n    while True:\n        sys.stdout.write('x' * 65536)\n",
            SHORT,
            "output_limit",
            "bytes of output",
        ),
    ],
)
def test_limits_stop_the_run(body: str, config: SandboxConfig, status: str, why: str) -> None:
    result = _tests(body, config)
    assert not result.ok and not result.passed and why in result.reason and result.status == status


@needs_sandbox
def test_the_scratch_directory_is_small_and_the_only_writable_place() -> None:
    assert "File too large" in _inside("open('big', 'wb').write(b'x' * 2 * 2**20)").failed["test_inside"]
    result = _inside("for i in range(40):\n    open(f'f{i}', 'wb').write(b'x' * (2**20 - 1))")
    assert "No space left on device" in result.failed["test_inside"]
    for path in ("/task/x", "/usr/x", "/x", "/tmp/x", "/runner/x"):
        result = _inside(f"open({path!r}, 'w')")
        assert "OSError" in result.failed["test_inside"] or "Error" in result.failed["test_inside"], path


@needs_sandbox
def test_the_view_from_inside() -> None:
    checks = {
        "unprivileged": "assert os.getuid() == os.geteuid() != 0 and os.getgid() != 0",
        "own pid namespace": "assert sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [1, os.getpid()]",
        "no network": "assert [l.split(':')[0].strip() for l in open('/proc/self/net/dev').readlines()[2:]] == ['lo']",
        "nothing else of the machine": f"assert sorted(os.listdir('/')) == {sorted(_expected_root())}",
        "no capabilities": "assert [l for l in open('/proc/self/status') if l.startswith('CapEff')] "
        "== ['CapEff:\\t0000000000000000\\n']",
        "seccomp on": "assert any(l.split() == ['Seccomp:', '2'] for l in open('/proc/self/status'))",
        "no environment": "assert set(os.environ) <= {'PWD', 'LC_CTYPE'}",
    }
    for name, check in checks.items():
        result = _inside(check)
        assert result.passed == ["test_inside"], (
            name,
            result.failed,
            result.reason,
        )  # reading /proc is noted, not stopped


def _expected_root() -> set[str]:
    """The top-level names the sandbox shows: its own folders, the loader's links, the Python installation's root."""
    tops = {"dev", "proc", "runner", "task", "usr", "work"}
    tops |= {top for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32") if os.path.lexists("/" + top)}
    python = os.path.realpath(sys.base_prefix).split("/")[1]
    return tops | {python}


@needs_sandbox
def test_file_names_must_be_plain() -> None:
    for name in ("../x.py", "a/b.py", ".hidden.py", ""):
        with pytest.raises(ValueError):
            run_tests({name: "", "test_x.py": ""}, "test_x", SHORT)


def test_switched_off_it_refuses_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.SWITCH, "off")
    with pytest.raises(SandboxUnavailable, match="code execution refused: the sandbox is switched off"):
        _tests("def f(x):\n    return x + 1\n")
    with pytest.raises(SandboxUnavailable):
        grade({"m.py": "def f(x):\n    return x\n"}, "m", [Case("c", "f", "(1,)", "1")], SHORT)


def test_without_bwrap_it_refuses_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sandbox.SWITCH, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    sandbox._probe.cache_clear()
    try:
        assert "bubblewrap (bwrap) is not installed" in (sandbox.unavailable() or "")
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            _tests("def f(x):\n    return x + 1\n")
    finally:
        sandbox._probe.cache_clear()
