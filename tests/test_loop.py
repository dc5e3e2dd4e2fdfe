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
from moe_fixtures import FAMILIES

from tracegym.errors import UserError
from tracegym.eval.arms import EPISODES_FILE, Arm, adapter_arm, evaluate_arm, read_episodes
from tracegym.eval.loop_report import REPORT, number, write_report
from tracegym.eval.target import TargetConfig
from tracegym.files import sha256_file

pytest_plugins = ("moe_fixtures",)  # the fixtures tiny_adapters and routed_folder
REPO = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
METRIC_FILES = (
    "base_agent/base_agent.json",
    "trajectories/rollouts.json",
    "analysis/capabilities.json",
    "adapters/*/artifact.json",
    "adapters/*/calibration.json",
    "eval/*/metrics.json",
    "report/comparisons.json",
)
HEADINGS = [
    "# tracegym loop report",
    "## Base agent",
    "## Diagnosis of the base agent's train-split runs",
    "## Adapters on their own environments",
    "### Held-out before and after GRPO, on the adapter's own family",
    "### Calibration",
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


ARMS = {
    "base": [0.0, 1.0, 0.0, 0.0],
    "adapter_policy_compliance": [0.0, 0.0, 0.0, 0.0],
    "mixture": [1.0, 1.0, 0.0, 0.0],
    "plain_grpo": [0.0, 1.0, 1.0, 1.0],
}
SAMPLED_BEFORE = [0.125, 0.25, 0.375, 0.25, 0.0, 0.5, 0.125, 0.375]  # the adapter's own family, per seed
SAMPLED_AFTER = [0.625, 0.75, 0.875, 1.0, 0.375, 0.875, 0.5, 0.75]


def _adapter(root: Path, capability: str) -> dict[str, Any]:
    """adapters/<capability>/ as training writes it: artifact.json with held-out before/after on its
    own family (`compare` of the per-seed scores), calibration.json with two rungs."""
    from tracegym.adapters.heldout import HeldoutScores, compare
    from tracegym.schema import AdapterArtifact, EnvSpec

    seeds = list(range(1_000_000, 1_000_008))
    before = HeldoutScores(seeds, [0.0] * 8, [0.0] * 8, SAMPLED_BEFORE, [0.0] * 8, sampled_rollouts=8)
    after = HeldoutScores(seeds, [1.0, 0.0] * 4, [1.0, 0.0] * 4, SAMPLED_AFTER, [0.0, 1.0] * 4, sampled_rollouts=8)
    knobs = {"n_orders": 3, "forbidden_share": 0.4}
    calibration = {"calibrated": True, "in_band": True, "accepted": True, "policy": "base"}
    artifact = AdapterArtifact(
        capability=capability,
        path=str(root / "adapters" / capability),
        base_model="smollm2-135m",
        env_spec=EnvSpec(
            capability=capability, family="precondition_verification", knobs=knobs, calibration=calibration
        ),
        credit="trace",
        metrics={
            "steps": 5,
            "rollouts": 40,
            "turn_budget_tokens": 96,
            "heldout_before": before.summary(),
            "heldout_after": after.summary(),
            "heldout_difference": compare(before, after),
            "heldout_per_seed": {"before": before.to_dict(), "after": after.to_dict()},
        },
    )
    _write(root / "adapters" / capability / "artifact.json", json.loads(artifact.model_dump_json()))
    curve = [
        {"knobs": {"n_orders": rung + 2}, "ladder_index": rung, "mean_reward": reward, "success_rate": success}
        for rung, reward, success in ((0, 0.875, 0.75), (1, 0.4375, 0.3125))
    ]
    family = {"family": "precondition_verification", "knobs": {"n_orders": 3}, "in_band": True, "curve": curve}
    _write(root / "adapters" / capability / "calibration.json", {"families": [family]})
    return json.loads(artifact.model_dump_json())


def fake_run(root: Path) -> Path:
    """A loop run directory with every metric file the report reads; returns report/."""
    stats = {
        "capability": {"name": "policy_compliance", "description": "follows the handbook"},
        "cov": [0.625],
        "er_minus": [0.875],
        "er_plus": [0.5],
        "delta": [0.375],
        "runs_passed": 1,
        "selected": True,
        "delta_mean": 0.375,
        "delta_ci": [0.125, 0.625],
        "paired_delta": 0.3125,
        "paired_tasks": 6,
    }
    _write(
        root / "analysis/capabilities.json",
        {
            "capabilities": [stats],
            "selected": ["policy_compliance"],
            "union_coverage": 0.625,
            "failure_sources": {"agent": 9, "user_simulator": 2, "benchmark": 0},
            "params": {"n": 1},
        },
    )
    _write(
        root / "base_agent/base_agent.json",
        {
            "model": "smollm2-135m",
            "warm_start": {
                "dialogues": 14,
                "first_loss": 1.8,
                "final_loss": 0.6,
                "seconds_per_step": 2.75,
                "config": {"lora_rank": 16, "steps": 6, "batch_size": 2},
            },
        },
    )
    _write(
        root / "trajectories/rollouts.json",
        {
            **_arm("base", [1.0, 0.0, 0.0, 1.0]),
            "episodes": 4,
            "successes": 2,
            "failures": 2,
            "trials": 1,
            "temperature": 0.7,
        },
    )
    for name, success in ARMS.items():
        _write(root / f"eval/{name}/metrics.json", _arm(name, success))
    _adapter(root, "policy_compliance")
    (root / "report").mkdir()
    return root / "report"


def test_every_number_in_the_report_comes_from_the_metric_files(tmp_path):
    write_report(tmp_path, list(ARMS), ["policy_compliance"], {}, fake_run(tmp_path))
    report = (tmp_path / "report" / REPORT).read_text()
    allowed = metric_numbers(tmp_path)
    assert "0.250 [0.000, 0.750]" not in allowed and "0.750" in allowed  # numbers, not cells
    assert stray_numbers(report, allowed) == [] and len(NUMBER.findall(report)) > 80
    assert (
        "`mixture` minus `base`: success +0.250" in report and "`mixture` minus `plain_grpo`: success -0.250" in report
    )
    planted = report.replace("| `mixture` | 0.500", "| `mixture` | 0.550", 1)
    assert planted != report and stray_numbers(planted, allowed) == ["0.550"], "a number not in the metric files passes"


def _row(report: str, *cells: str) -> str:
    """The one table row of `report` that starts with `cells`."""
    rows = [line for line in report.splitlines() if line.startswith("| " + " | ".join(cells) + " |")]
    assert len(rows) == 1, f"{len(rows)} rows start with {cells}"
    return rows[0]


def test_the_report_holds_each_adapters_before_and_after_on_its_own_family(tmp_path):
    from tracegym.eval.loop_report import change, interval

    write_report(tmp_path, list(ARMS), ["policy_compliance"], {}, fake_run(tmp_path))
    report = (tmp_path / "report" / REPORT).read_text()
    metrics = json.loads((tmp_path / "adapters/policy_compliance/artifact.json").read_text())["metrics"]
    assert set(metrics["heldout_difference"]) == {
        "greedy_reward",
        "greedy_success",
        "sampled_reward",
        "sampled_success",
    }
    for key, difference in metrics["heldout_difference"].items():
        row = _row(report, "`policy_compliance`", *key.split("_"), "8")
        before, after = interval(metrics["heldout_before"][key]), interval(metrics["heldout_after"][key])
        assert row.endswith(f"| {before} | {after} | {change(difference)} |"), row
    gain = metrics["heldout_difference"]["sampled_reward"]
    assert gain["low"] > 0 and f"+{gain['mean']:.3f} [+{gain['low']:.3f}, +{gain['high']:.3f}]" in report
    assert (
        "| `policy_compliance` | `precondition_verification` | `n_orders=3, forbidden_share=0.4` | in band |" in report
    )
    assert _row(report, "`policy_compliance`", "`precondition_verification`", "0").endswith("| 0.875 | 0.750 | no |")
    assert _row(report, "`policy_compliance`", "`precondition_verification`", "1").endswith("| 0.438 | 0.312 | yes |")

    path = tmp_path / "adapters/policy_compliance/artifact.json"
    unscored = json.loads(path.read_text())
    unscored["metrics"] = {key: unscored["metrics"][key] for key in ("steps", "rollouts", "turn_budget_tokens")}
    path.write_text(json.dumps(unscored))
    write_report(tmp_path, list(ARMS), ["policy_compliance"], {}, tmp_path / "report")
    report = (tmp_path / "report" / REPORT).read_text()
    assert "Not scored before and after (`eval.seeds` is 0): `policy_compliance`." in report
    assert "after minus before" not in report


def missing_figures(terminal: str, report: str) -> list[str]:
    """Numbers of `terminal` that `report` does not print: an integer as it is, a decimal to at
    least the terminal's precision (the terminal's 0.38 is the report's 0.375)."""
    tokens = NUMBER.findall(report)
    values = [float(token) for token in tokens]

    def printed(token: str) -> bool:
        if "." not in token:
            return token in tokens
        half = 0.5 * 10 ** -len(token.split(".")[1]) + 1e-9
        return any(abs(value - float(token)) <= half for value in values)

    return [token for token in NUMBER.findall(terminal.replace("95%", "")) if not printed(token)]


def test_every_figure_tracegym_run_prints_is_in_the_report(tmp_path):
    from tracegym.analysis.report import selection_table
    from tracegym.eval.config import RunConfig
    from tracegym.eval.pipeline import _summary, format_summary
    from tracegym.schema import AdapterArtifact, CapabilityReport

    write_report(tmp_path, list(ARMS), ["policy_compliance"], {}, fake_run(tmp_path))
    report = (tmp_path / "report" / REPORT).read_text()
    artifact = AdapterArtifact.model_validate_json((tmp_path / "adapters/policy_compliance/artifact.json").read_text())
    summary = _summary(tmp_path, [artifact.env_spec], [artifact], RunConfig(model="smollm2-135m"))
    summary["report"] = str(tmp_path / "report" / REPORT)
    summary["arms"] = {  # as run_pipeline reads them
        arm: {
            key: json.loads((tmp_path / f"eval/{arm}/metrics.json").read_text())[key]
            for key in ("success", "reward", "rollouts")
        }
        for arm in ARMS
    }
    diagnosis = CapabilityReport.model_validate_json((tmp_path / "analysis/capabilities.json").read_text())
    terminal = (selection_table(diagnosis) + "\n" + format_summary(summary)).replace(str(tmp_path), "RUN")
    assert len(NUMBER.findall(terminal)) > 50 and "+0.469" in terminal, terminal
    assert missing_figures(terminal, report) == []
    assert missing_figures(terminal, report.replace("0.469", "0.496")) == ["0.469"]


def _inside(figure: Any, artists: list[Any]) -> None:
    """Every artist (a title, a label, tick labels) lies whole inside the saved image."""
    renderer = figure.canvas.get_renderer()
    box = figure.bbox
    for artist in artists:
        extent = artist.get_window_extent(renderer)
        assert box.x0 - 0.5 <= extent.x0 and extent.x1 <= box.x1 + 0.5, f"{artist} is cut left or right"
        assert box.y0 - 0.5 <= extent.y0 and extent.y1 <= box.y1 + 0.5, f"{artist} is cut at the top or bottom"


def test_the_success_plot_writes_every_arms_value_beside_its_bar(tmp_path):
    from tracegym.eval.report_plots import arm_label, success_figure

    arms = {name: _arm(name, success) for name, success in ARMS.items()}
    figure = success_figure(arms)
    figure.canvas.draw()
    (axes,) = figure.axes
    assert arms["adapter_policy_compliance"]["success"]["mean"] == 0.0, "an arm at zero is drawn"
    assert [text.get_text() for text in axes.texts] == [number(m["success"]["mean"]) for m in arms.values()]
    for bar, text, stat in zip(axes.patches, axes.texts, (m["success"] for m in arms.values())):
        assert text.xy == (stat["high"], bar.get_y() + bar.get_height() / 2), "a value beside another bar"
    assert [label.get_text() for label in axes.get_yticklabels()] == [arm_label(name) for name in ARMS]
    assert "adapter: policy compliance" in arm_label("adapter_policy_compliance")
    assert axes.get_title() and "95% interval" in axes.get_xlabel()
    _inside(figure, [axes.title, axes.xaxis.label, *axes.get_yticklabels(), *axes.texts])


def test_the_reward_plot_has_a_panel_per_trained_arm_with_whole_steps():
    from tracegym.eval.report_plots import arm_label, reward_figure

    logs = {
        "adapter_policy_compliance": [{"step": step, "reward_mean": 0.25 * step} for step in (1, 2, 3)],
        "adapter_error_recovery": [{"step": step, "reward_mean": 0.5} for step in range(1, 41)],
        "plain_grpo": [{"step": 1, "reward_mean": 0.0}],
        "untrained": [],
    }
    figure = reward_figure(logs)
    figure.canvas.draw()
    panels = [axes for axes in figure.axes if axes.get_visible()]
    assert [axes.get_title() for axes in panels] == [arm_label(name) for name in list(logs)[:3]]
    assert figure.get_suptitle() and panels[0].get_ylabel() == "mean training reward"
    for axes, records in zip(panels, logs.values()):
        low, high = axes.get_xlim()
        ticks = [tick for tick in axes.get_xticks() if low <= tick <= high]
        assert ticks and all(float(tick).is_integer() for tick in ticks), f"{axes.get_title()}: steps at {ticks}"
        assert axes.get_xlabel() == "GRPO step" and [line.get_xdata().tolist() for line in axes.lines] == [
            [r["step"] for r in records]
        ]
    assert [tick for tick in panels[0].get_xticks() if 0.5 <= tick <= 3.5] == [1, 2, 3]
    for axes in panels:
        low, high = axes.get_xlim()
        shown = [label for label in axes.get_xticklabels() if low <= label.get_position()[0] <= high]
        _inside(figure, [axes.title, axes.xaxis.label, axes.yaxis.label, *shown])


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
    assert missing_figures(output[output.index("run directory:") :].replace(str(out), "RUN"), report) == []
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
