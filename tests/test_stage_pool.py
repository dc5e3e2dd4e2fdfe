"""Stages played at once in worker processes (`tracegym.eval.stage_pool`): the same artifacts as one
after the other, the run's bookkeeping kept by the main process, finished stages kept when another
fails, and library output in run.log."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from tracegym.errors import UserError
from tracegym.eval.arms import EPISODES_FILE, METRICS_FILE, Arm, evaluate_arm
from tracegym.eval.run_log import LOG_FILE
from tracegym.eval.rundir import RunDirectory
from tracegym.eval.stage_pool import run_stages
from tracegym.eval.target import TargetConfig

pytest_plugins = ("moe_fixtures",)  # the fixture tiny_adapters


def _write(text: str, folder: Path) -> list[Path]:
    warnings.warn(f"library chatter from stage {text}", stacklevel=1)
    stages = json.loads((folder.parent / "run.json").read_text())["stages"].values()
    (folder / "running.txt").write_text(str(sum(stage["status"] == "running" for stage in stages)))
    path = folder / "out.txt"
    path.write_text(text)
    return [path]


def _fail(message: str, folder: Path) -> list[Path]:
    raise UserError(message)


def test_finished_stages_are_recorded_when_another_fails_and_only_the_rest_rerun(tmp_path, capfd):
    run = RunDirectory(tmp_path / "run", {"config": 1})
    with pytest.raises(UserError, match="broken input"):
        run_stages(run, {"a": (_write, ("a",)), "b": (_fail, ("broken input",)), "c": (_write, ("c",))}, workers=2)
    assert run.is_complete("a") and run.is_complete("c") and not run.is_complete("b")
    assert run.manifest["stages"]["b"]["status"] == "running"
    first = {stage: run.manifest["stages"][stage] for stage in ("a", "c")}

    run = RunDirectory(tmp_path / "run", {"config": 1})  # a rerun reads the manifest back
    run_stages(run, {"a": (_write, ("A",)), "b": (_write, ("b",)), "c": (_write, ("C",))}, workers=2)
    assert {stage: run.manifest["stages"][stage] for stage in ("a", "c")} == first
    assert [(tmp_path / "run" / s / "out.txt").read_text() for s in "abc"] == ["a", "b", "c"]
    printed = capfd.readouterr()
    assert "== a  (complete, skipped)" in printed.out and "== b\n" in printed.out
    assert "chatter" not in printed.err and "library chatter from stage b" in (tmp_path / "run" / LOG_FILE).read_text()


def test_a_stage_is_marked_running_when_a_worker_takes_it(tmp_path):
    run = RunDirectory(tmp_path / "run", {"config": 1})
    run_stages(run, {stage: (_write, (stage,)) for stage in "abcd"}, workers=2)
    running = [int((tmp_path / "run" / stage / "running.txt").read_text()) for stage in "abcd"]
    assert max(running) <= 2 and all((tmp_path / "run" / stage / "out.txt").read_text() == stage for stage in "abcd")


def test_arms_played_at_once_equal_the_arms_played_one_after_the_other(tmp_path, tiny_adapters):
    target = TargetConfig(train_tasks=1, heldout_tasks=3, max_turns=16, turn_slack=0, prompt="compact")
    arms = [
        Arm("base", "model", "tiny", "", "tiny", 0, 0, 0.0),
        Arm("adapter", "peft", str(tiny_adapters[0]), "", "tiny", 2, 0, 0.0),
    ]
    evaluate = functools.partial(evaluate_arm, progress=False)
    played = {}
    for workers in (1, 2):
        run = RunDirectory(tmp_path / f"workers{workers}", {"config": 1})
        run_stages(run, {f"eval/{arm.name}": (evaluate, (arm, target, 8)) for arm in arms}, workers)
        assert all(run.is_complete(f"eval/{arm.name}") for arm in arms)
        played[workers] = [
            (
                (run.root / "eval" / arm.name / EPISODES_FILE).read_text(),
                json.loads((run.root / "eval" / arm.name / METRICS_FILE).read_text())["per_seed"],
            )
            for arm in arms
        ]
    assert played[1] == played[2]


def _sleep(pid_file: str, folder: Path) -> list[Path]:
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(120)
    return []


def test_a_killed_run_leaves_no_worker_behind(tmp_path):
    pid_file = tmp_path / "worker.pid"
    script = (
        "from pathlib import Path; from tracegym.eval.rundir import RunDirectory; "
        "from tracegym.eval.stage_pool import run_stages; "
        f"import test_stage_pool as t; run_stages(RunDirectory(Path({str(tmp_path / 'run')!r}), {{}}), "
        f"{{'a': (t._sleep, ({str(pid_file)!r},)), 'b': (t._sleep, ({str(tmp_path / 'other.pid')!r},))}}, 2)"
    )
    run = subprocess.Popen(
        [sys.executable, "-c", script], cwd=Path(__file__).parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while not pid_file.is_file() or not pid_file.read_text():
        assert run.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    run.kill()
    run.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "the worker outlived the run"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("parent_alive", [True, False])
def test_a_worker_whose_run_died_while_it_started_exits(tmp_path, parent_alive):
    """The death signal is asked for only once the worker runs its setup; a run killed before that
    is caught by the parent check instead."""
    parent = "os.getppid()" if parent_alive else "os.getppid() + 1_000_000"
    script = (
        "import os; from pathlib import Path; from tracegym.eval.stage_pool import _start_worker; "
        f"_start_worker(Path({str(tmp_path)!r}), 1, {parent})"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == (0 if parent_alive else 1), done.stderr
