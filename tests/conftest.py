"""Shared fixtures: the real data folder beside the checkout, and the tiny test model. Tests that
need the code sandbox skip where none can run (bwrap not installed, or TRACEGYM_SANDBOX=off) and
fail where bwrap is installed but the sandbox does not start: a broken sandbox never passes as a
skip."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from tracegym.synth_envs import sandbox
from tracegym.synth_envs.sandbox import SandboxUnavailable

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # lets a test ask CUDA for deterministic kernels


def shared_data_dir() -> Path:
    """`$TRACEGYM_SHARED_DATA`, else `../shared/data` beside the checkout."""
    return Path(os.environ.get("TRACEGYM_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"real agent runs not available: {path} is absent (set TRACEGYM_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def tiny():
    """A random 2-layer Llama with SmolLM2's tokenizer: (model, tokenizer)."""
    from tracegym.models import tiny_model

    return tiny_model()


def broken_sandbox() -> str | None:
    """Why the sandbox is broken here (bwrap installed, the trial run fails); None otherwise."""
    found = sandbox.availability()
    return found.reason if found.state == "broken" else None


def _broken_message(reason: str) -> str:
    return (
        f"the code sandbox is broken: {reason}. Fix it, or set TRACEGYM_SANDBOX=off to skip the tests "
        "that need it knowingly"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """A test that runs code-repair code where no sandbox can run (bwrap not installed, or
    TRACEGYM_SANDBOX=off) skips, saying why; where the sandbox is broken it fails. Tests of the
    refusal expect it with pytest.raises."""
    try:
        return (yield)
    except SandboxUnavailable as error:
        refusal = str(error)
    reason = broken_sandbox()
    if reason is not None:
        pytest.fail(_broken_message(reason), pytrace=False)
    pytest.skip(f"needs the code sandbox: {refusal}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, Any, Any]:
    """A skip whose reason names a broken sandbox's fault (a test's own `skipif(unavailable())`)
    is a failure."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = broken_sandbox()
        if reason is not None and reason in str(report.longrepr):
            report.outcome, report.longrepr = "failed", _broken_message(reason)
    return report


@pytest.fixture
def fresh_accelerate_state():
    """TRL's trainer initialises accelerate's process-wide state; reset it so later tests start clean."""
    from accelerate.state import AcceleratorState

    yield
    AcceleratorState._reset_state(reset_partial_state=True)
