"""The loop on the target (`tracegym run` without inputs): report.md's numbers all come from the
run's own metric files, and a run killed at any stage resumes without redoing finished stages or
corrupting artifacts (tiny model, `--quick`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moe_fixtures import FAMILIES, routed_folder, tiny_adapters  # noqa: F401 (fixtures)

from tracegym.errors import UserError
from tracegym.eval.arms import EPISODES_FILE, Arm, adapter_arm, evaluate_arm, read_episodes
from tracegym.eval.loop_report import REPORT, number, write_report
from tracegym.eval.target import TargetConfig
from tracegym.files import sha256_file

REPO = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
METRIC_FILES = (
    "base_agent/base_agent.json",
    "trajectories/rollouts.json",
    "analysis/capabilities.json",
    "eval/*/metrics.json",
    "report/comparisons.json",
)
HEADINGS = [
    "# tracegym loop report",
    "## Base agent",
    "## Diagnosis of the base agent's train-split runs",
    "## Held-out split",
    "## Paired differences (bootstrap over held-out tasks)",
    "## Plots",
]
QUICK_ARMS = [
    "base",
    "adapter_precondition_verification",
    "adapter_policy_compliance",
    "task_router",
    "mixture",
    "plain_grpo",
]


def _values(data: Any) -> Iterator[float | int]:
    if isinstance(data, dict):
        for value in data.values():
            yield from _values(value)
    elif isinstance(data, list):
        for value in data:
            yield from _values(value)
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        yield data


def metric_numbers(root: Path) -> set[str]:
    """Every number in the run's metric files, printed as report.md prints numbers."""
    return {
        number(value)
        for pattern in METRIC_FILES
        for path in root.glob(pattern)
        for value in _values(json.loads(path.read_text()))
    }


def stray_numbers(report: str, allowed: set[str]) -> list[str]:
    """Numbers of `report` (outside code spans and the "95%" label) that no metric file holds."""
    text = re.sub(r"`[^`]*`", "", report).replace("95%", "")
    return [token for token in NUMBER.findall(text) if token not in allowed]


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _arm(name: str, success: list[float]) -> dict[str, Any]:
    from tracegym.stats import mean_interval

    return {
        "arm": name,
        "rollouts": 8,
        "calibration_rollouts": 4,
        "train_seconds": 12.5,
        "eval_seconds": 3.25,
        "success": mean_interval(success),
        "reward": mean_interval(success),
        "per_seed": {"seeds": [1, 2, 3, 4], "success": success, "reward": success},
    }


def test_every_number_in_the_report_comes_from_the_metric_files(tmp_path):
    stats = {
        "capability": {"name": "policy_compliance"},
        "delta_mean": 0.375,
        "delta_ci": [0.125, 0.625],
        "selected": True,
    }
    _write(tmp_path / "analysis/capabilities.json", {"capabilities": [stats], "selected": ["policy_compliance"]})
    _write(
        tmp_path / "base_agent/base_agent.json",
        {
            "model": "smollm2-135m",
            "warm_start": {
                "dialogues": 14,
                "first_loss": 1.8,
                "final_loss": 0.6,
                "config": {"lora_rank": 16, "steps": 6, "batch_size": 2},
            },
        },
    )
    _write(
        tmp_path / "trajectories/rollouts.json",
        {
            **_arm("base", [1.0, 0.0, 0.0, 1.0]),
            "episodes": 4,
            "successes": 2,
            "failures": 2,
            "trials": 1,
            "temperature": 0.7,
        },
    )
    for name, success in (
        ("base", [0.0, 1.0, 0.0, 0.0]),
        ("mixture", [1.0, 1.0, 0.0, 0.0]),
        ("plain_grpo", [0.0, 1.0, 1.0, 1.0]),
    ):
        _write(tmp_path / f"eval/{name}/metrics.json", _arm(name, success))
    (tmp_path / "report").mkdir()
    write_report(tmp_path, ["base", "mixture", "plain_grpo"], ["policy_compliance"], {}, tmp_path / "report")
    report = (tmp_path / "report" / REPORT).read_text()
    allowed = metric_numbers(tmp_path)
    assert "0.250 [0.000, 0.750]" not in allowed and "0.750" in allowed  # numbers, not cells
    assert stray_numbers(report, allowed) == [] and len(NUMBER.findall(report)) > 40
    assert (
        "`mixture` minus `base`: success 0.250" in report and "`mixture` minus `plain_grpo`: success -0.250" in report
    )
    planted = report.replace("| `mixture` | 0.500", "| `mixture` | 0.550", 1)
    assert planted != report and stray_numbers(planted, allowed) == ["0.550"], "a number not in the metric files passes"


def test_the_task_routers_arm_is_the_episodes_of_the_arms_it_routes_to(tmp_path, routed_folder):
    target = TargetConfig(train_tasks=1, heldout_tasks=4, max_turns=16, turn_slack=0, prompt="compact")
    eval_root = tmp_path / "eval"
    adapters = {adapter_arm(family): routed_folder / "adapters" / family for family in FAMILIES}
    arms = [
        Arm("base", "model", "tiny", "", "tiny", 0, 0, 0.0),
        *(Arm(name, "peft", str(folder), "", "tiny", 2, 0, 0.0) for name, folder in adapters.items()),
    ]
    router = Arm("task_router", "routed", str(routed_folder), "task", "tiny", 4, 0, 0.0)
    with pytest.raises(UserError, match="episodes"):
        evaluate_arm(router, target, 8, eval_root / router.name)  # its arms are not evaluated yet
    for arm in arms:
        evaluate_arm(arm, target, 8, eval_root / arm.name)
    evaluate_arm(router, target, 8, eval_root / router.name)

    metrics = json.loads((eval_root / "task_router" / "metrics.json").read_text())
    episodes = read_episodes(eval_root / "task_router" / EPISODES_FILE, target)
    assert len(metrics["routed_to"]) == len(episodes) == 4 and set(metrics["routed_to"]) <= {"base", *adapters}
    for episode, chosen in zip(episodes, metrics["routed_to"]):
        played = {e.task.seed: e for e in read_episodes(eval_root / chosen / EPISODES_FILE, target)}
        assert episode == played[episode.task.seed]
    chosen_rewards = [
        json.loads((eval_root / chosen / "metrics.json").read_text())["per_seed"]["reward"][i]
        for i, chosen in enumerate(metrics["routed_to"])
    ]
    assert metrics["per_seed"]["reward"] == chosen_rewards
    traces = [json.loads(line) for line in (eval_root / "task_router" / "trajectories.jsonl").read_text().splitlines()]
    assert [t["task_id"] for t in traces] == [e.task.id for e in episodes]
    broken = eval_root / "base" / EPISODES_FILE
    for text in ('{"seed": 1000000}\n', "not json\n", '{"seed": 1000000, "messages": [{"role": 3}]}\n'):
        broken.write_text(text)
        with pytest.raises(UserError, match=re.escape(str(broken))):
            read_episodes(broken, target)


def _start(out: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "tracegym.cli", "run", "--quick", "--out", str(out)]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _stages(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / "run.json").read_text())["stages"]
    except (OSError, json.JSONDecodeError, KeyError):
        return {}


def _kill_when_running(out: Path, stage: str, limit: float = 600.0) -> dict[str, Any]:
    """Run `--quick` into `out` and SIGKILL it once `stage` is running; the stages recorded then."""
    process = _start(out)
    deadline = time.monotonic() + limit
    while _stages(out).get(stage, {}).get("status") != "running":
        assert process.poll() is None, f"the run ended before {stage} started:\n{process.stdout.read()[-3000:]}"
        assert time.monotonic() < deadline, f"{stage} did not start in {limit} s"
        time.sleep(0.1)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    process.stdout.close()
    return _stages(out)


def _complete(stages: dict[str, Any]) -> dict[str, Any]:
    return {name: record for name, record in stages.items() if record.get("status") == "complete"}


def _mtimes(out: Path, stages: dict[str, Any]) -> dict[str, int]:
    return {path: (out / path).stat().st_mtime_ns for record in stages.values() for path in record["artifacts"]}


@pytest.mark.slow
def test_killed_at_stages_the_run_resumes_without_redoing_finished_ones(tmp_path):
    out = tmp_path / "run"
    finished: dict[str, Any] = {}
    for stage in ("adapters/policy_compliance", "eval/base", "report"):
        before = _kill_when_running(out, stage)
        done = _complete(before)
        assert stage not in done and set(finished) <= set(done)
        assert {name: done[name] for name in finished} == finished, "a finished stage was redone"
        finished, mtimes = done, _mtimes(out, done)
    process = _start(out)
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output[-3000:]
    stages = _stages(out)
    assert all(record["status"] == "complete" for record in stages.values())
    assert {name: stages[name] for name in finished} == finished and _mtimes(out, finished) == mtimes
    for name in finished:
        assert f"== {name}  (complete, skipped)" in output
    for record in stages.values():
        for path, digest in record["artifacts"].items():
            assert sha256_file(out / path) == digest, f"{path} differs from its recorded hash"
    report = (out / "report" / REPORT).read_text()
    assert [line for line in report.splitlines() if line.startswith("#")] == HEADINGS
    assert [
        row.split("`")[1] for row in report.split("## Held-out split")[1].splitlines() if row.startswith("| `")
    ] == QUICK_ARMS
    assert stray_numbers(report, metric_numbers(out)) == []
    manifest = json.loads((out / "run.json").read_text())
    assert {"config", "versions", "inputs"} <= set(manifest) and manifest["config"]["model"] == "tiny"
    for arm in QUICK_ARMS:
        assert (out / "eval" / arm / "trajectories.jsonl").is_file() and list(
            (out / "eval" / arm / "results").glob("*.json")
        )


def test_quick_sits_under_the_config_file_and_the_flags(tmp_path):
    from tracegym.cli import build_parser
    from tracegym.config import resolve_config
    from tracegym.eval.config import RunConfig
    from tracegym.eval.run_cli import QUICK

    (tmp_path / "c.toml").write_text("[router]\nsteps = 7\n[grpo]\ngroup_size = 3\n")
    args = build_parser("run").parse_args(
        ["run", "--quick", "--out", "x", "--config", str(tmp_path / "c.toml"), "--grpo-group-size", "5"]
    )
    config = resolve_config(RunConfig, args, QUICK)
    assert config.model == "tiny" and config.target.train_tasks == 7  # from quick.toml
    assert config.router.steps == 7 and config.grpo.group_size == 5  # the file over quick.toml, the flag over both
    assert resolve_config(RunConfig, build_parser("run").parse_args(["run", "--out", "x"])).model != "tiny"


def test_a_fallback_capability_is_trained_whether_or_not_the_diagnosis_labels_it(tmp_path):
    from tracegym.cli import build_parser
    from tracegym.config import resolve_config
    from tracegym.eval.config import RunConfig
    from tracegym.eval.pipeline import trained_capabilities
    from tracegym.schema import CapabilityReport

    unlabelled = CapabilityReport(capabilities=[], selected=[])  # a τ² diagnosis never labels error_recovery
    assert [c.name for c in trained_capabilities(unlabelled, ["error_recovery"])] == ["error_recovery"]
    (tmp_path / "c.toml").write_text('[loop]\nfallback_capabilities = ["error_recovry", "test_verification"]\n')
    args = build_parser("run").parse_args(["run", "--out", "x", "--config", str(tmp_path / "c.toml")])
    with pytest.raises(UserError, match="no environment family trains error_recovry, test_verification"):
        resolve_config(RunConfig, args)


def test_an_adapters_warm_start_prints_its_loss_dicts_to_run_log_not_the_terminal(tmp_path, capfd):
    from dataclasses import replace

    from tracegym.cli import build_parser
    from tracegym.config import resolve_config
    from tracegym.eval.config import RunConfig
    from tracegym.eval.pipeline import _train
    from tracegym.eval.run_cli import QUICK
    from tracegym.eval.run_log import LOG_FILE
    from tracegym.schema import EnvSpec

    config = resolve_config(RunConfig, build_parser("run").parse_args(["run", "--quick", "--out", "x"]), QUICK)
    config = replace(
        config,
        warm_start=replace(config.warm_start, enabled=True, dialogues=2, steps=1),
        calibration=replace(config.calibration, enabled=False),
    )
    spec = EnvSpec(capability="error_recovery", family="error_recovery", knobs={})
    _train(tmp_path / "adapters" / "error_recovery", tmp_path, spec, config)
    assert "'loss'" not in capfd.readouterr().out
    assert "'loss'" in (tmp_path / LOG_FILE).read_text()
