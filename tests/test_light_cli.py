"""Commands that neither generate nor train import no training library (issue 9), nor the judge's
`openai` client unless a judge is used.

Each command runs in a fresh interpreter through a wrapper that, at exit, prints which of the heavy
modules are in `sys.modules`; none may be.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracegym.analysis.examples import write_example_run

HEAVY = ("torch", "transformers", "peft", "trl", "accelerate", "openai")
MARK = "HEAVY MODULES:"
WRAPPER = f"""
import atexit, sys
atexit.register(lambda: print({MARK!r}, ",".join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr))
{{plant}}
from tracegym.cli import main
sys.exit(main(sys.argv[1:]))
"""


def heavy_modules(*argv: str, plant: str = "") -> list[str]:
    """Run `tracegym ARGV` through the wrapper (after the code `plant`); the heavy modules it had
    imported when it exited."""
    code = WRAPPER.format(plant=plant)
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stderr.splitlines() if line.startswith(MARK))
    return [name for name in line[len(MARK) :].strip().split(",") if name]


def test_ingest_and_diagnose_import_no_training_library(tmp_path: Path) -> None:
    run = write_example_run(tmp_path / "run")
    assert heavy_modules("ingest", str(run), "--out", str(tmp_path / "ingested")) == []
    assert (
        heavy_modules(
            "diagnose", str(tmp_path / "ingested" / "trajectories.jsonl"), "--out", str(tmp_path / "diagnosis")
        )
        == []
    )
    # The check itself: a module planted under a heavy name is reported.
    assert heavy_modules("ingest", str(run), "--out", str(tmp_path / "again"), plant="sys.modules['peft'] = sys") == [
        "peft"
    ]


@pytest.mark.parametrize(
    "command", [("--help",), ("envs", "list"), ("train", "--help"), ("run", "--help"), ("synth", "--help")]
)
def test_help_and_envs_import_no_training_library(command) -> None:
    assert heavy_modules(*command) == []
