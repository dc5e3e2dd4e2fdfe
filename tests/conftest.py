"""Shared fixtures: the real data folder beside the checkout, and the tiny test model; tests that
need the code sandbox skip where it is unavailable."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """A test that runs code-repair code where no sandbox can be set up (no bwrap, no namespaces,
    or TRACEGYM_SANDBOX=off) skips, saying why; tests of the refusal expect it with pytest.raises."""
    try:
        return (yield)
    except SandboxUnavailable as error:
        pytest.skip(f"needs the code sandbox: {error}")
