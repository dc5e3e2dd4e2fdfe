"""A broken sandbox cannot pass as a skip: where bwrap is installed but no sandbox starts, the tests
that need it fail with the reason; they skip, saying why, only where bwrap is not installed or the
sandbox is switched off (TRACEGYM_SANDBOX=off).

The broken sandbox is simulated with a `bwrap` on PATH that exits 1, and the outcomes are read from
a pytest run of a few sandbox tests in a subprocess (the probe runs once per process)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tracegym.synth_envs import sandbox

REPO = Path(__file__).resolve().parents[1]
# one of each way a test meets the sandbox: the conftest's turn of SandboxUnavailable (the first),
# the probe's own test, a module's skipif(unavailable()), a fixture's pytest.skip(unavailable())
SANDBOX_TESTS = [
    "tests/test_sandbox_ci.py::test_graded_code_runs_in_the_sandbox",
    "tests/test_sandbox_ci.py::test_a_sandbox_starts_wherever_bwrap_is_installed",
    "tests/test_envs_sandbox.py::test_a_clean_run_reports_each_test",
    "tests/test_hostile.py::test_the_fix_alone_earns_one[sandboxed]",
]


def test_graded_code_runs_in_the_sandbox() -> None:
    """No skip of its own: where no sandbox runs, grade raises SandboxUnavailable for the conftest."""
    result = sandbox.grade({"m.py": "def f(x):\n    return x + 1\n"}, "m", [sandbox.Case("c", "f", "(1,)", "2")])
    assert result.ok and result.passed == ["c"]


def test_a_sandbox_starts_wherever_bwrap_is_installed() -> None:
    found = sandbox.availability()
    if found.state in ("off", "missing"):
        pytest.skip(f"no sandbox here: {found.reason}")
    assert found.state == "ok", found.reason


def _outcomes(env: dict[str, str], junit: Path) -> tuple[int, dict[str, tuple[str, str]], str]:
    """Run SANDBOX_TESTS in a fresh pytest under `env`: its exit status, {test name: (outcome,
    message)} with outcome passed, failure, error or skipped, and its output."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *SANDBOX_TESTS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    outcomes = {}
    for case in ET.parse(junit).iter("testcase"):
        ends = [(child.tag, child.get("message", "")) for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name", "")] = ends[0] if ends else ("passed", "")
    return run.returncode, outcomes, run.stdout + run.stderr


def _tools_beside_bwrap() -> list[str]:
    return ["prlimit", "setpriv"] if os.geteuid() == 0 else ["prlimit"]


@pytest.fixture
def broken_bwrap(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH finds a `bwrap` that exits 1 (and the real prlimit and setpriv)."""
    missing = [tool for tool in _tools_beside_bwrap() if shutil.which(tool) is None]
    if missing or sandbox._seccomp_program() is None:
        pytest.skip(f"a sandbox cannot be set up here at all: {sandbox.unavailable()}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: simulated failure' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop(sandbox.SWITCH, None)
    return env


def test_a_broken_sandbox_fails_the_tests_that_need_it(broken_bwrap: dict[str, str], tmp_path: Path) -> None:
    status, outcomes, output = _outcomes(broken_bwrap, tmp_path / "junit.xml")
    assert len(outcomes) == len(SANDBOX_TESTS), output[-3000:]
    assert {kind for kind, _ in outcomes.values()} <= {"failure", "error"}, (outcomes, output[-3000:])
    assert status == 1
    for _, message in outcomes.values():
        assert "bwrap is installed but could not start a sandbox here" in message, message
        assert "simulated failure" in message  # the reason carries what bwrap said


@pytest.mark.parametrize("cause", ["bwrap not installed", "switched off"])
def test_without_bwrap_or_switched_off_they_skip_saying_why(cause: str, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != sandbox.SWITCH}
    if cause == "switched off":
        env[sandbox.SWITCH], reason = "off", "switched off"
    else:
        (tmp_path / "empty").mkdir()
        env["PATH"], reason = str(tmp_path / "empty"), "bubblewrap (bwrap) is not installed"
    status, outcomes, output = _outcomes(env, tmp_path / "junit.xml")
    assert [kind for kind, _ in outcomes.values()] == ["skipped"] * len(SANDBOX_TESTS), (outcomes, output[-3000:])
    assert status == 0
    for _, message in outcomes.values():
        assert reason in message, message
