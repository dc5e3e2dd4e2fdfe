"""report.md of the loop, written only from the run's own metric files.

Reads `base_agent/base_agent.json`, `trajectories/rollouts.json`, `analysis/capabilities.json`,
`adapters/<capability>/artifact.json` and `calibration.json`, `eval/<arm>/metrics.json` and the
training logs; computes the paired comparisons into `report/comparisons.json` first, then renders
every number of report.md from those files (a test checks that every number in the report occurs
in them). report.md holds every figure `tracegym run` prints on the terminal. Plots
(`tracegym.eval.report_plots`): held-out success per arm with its 95% interval, and the training
reward of each trained arm per GRPO step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracegym.adapters.artifacts import CURVE_FILE
from tracegym.adapters.grpo import read_log
from tracegym.eval.gap_figures import format_gap, gap_figures
from tracegym.eval.report_plots import reward_figure, save, success_figure
from tracegym.stats import paired_difference

REPORT = "report.md"
COMPARISONS = "comparisons.json"
SUCCESS_PLOT = "heldout_success.png"
REWARD_PLOT = "training_reward.png"
MIXTURE, BASE, PLAIN = "mixture", "base", "plain_grpo"
COMPARED = ((MIXTURE, BASE), (MIXTURE, PLAIN))


def number(value: float | int | None) -> str:
    """How report.md prints a number: integers as they are, other values to 3 decimals, None as -."""
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.3f}"


def interval(stat: dict[str, float]) -> str:
    """`mean [low, high]` of a {mean, low, high} record, each as `number` prints it."""
    return f"{number(stat['mean'])} [{number(stat['low'])}, {number(stat['high'])}]"


def signed(value: float) -> str:
    """A difference to 3 decimals with its sign: +0.469, -0.250."""
    return f"{value:+.3f}"


def change(stat: dict[str, float]) -> str:
    """`+mean [+low, +high]` of a paired difference, as the terminal prints it."""
    return f"{signed(stat['mean'])} [{signed(stat['low'])}, {signed(stat['high'])}]"


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def comparisons(arms: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Paired bootstrap differences (same held-out seeds) of success and reward for COMPARED pairs
    whose both arms were evaluated."""
    rows = []
    for first, second in COMPARED:
        if first in arms and second in arms:
            a, b = arms[first]["per_seed"], arms[second]["per_seed"]
            rows.append(
                {
                    "arm": first,
                    "versus": second,
                    "success": paired_difference(b["success"], a["success"]),
                    "reward": paired_difference(b["reward"], a["reward"]),
                }
            )
    return rows


def _base_agent_section(made: dict[str, Any], rollouts: dict[str, Any]) -> list[str]:
    lines = ["## Base agent", ""]
    warm = made["warm_start"]
    if warm is None:
        lines.append(f"`{made['model']}` as it is (no warm start).")
    else:
        config = warm["config"]
        speed = f", {number(warm['seconds_per_step'])} s per step" if "seconds_per_step" in warm else ""
        lines.append(
            f"`{made['model']}` warm-started with LoRA SFT (rank {number(config['lora_rank'])}) on "
            f"{number(warm['dialogues'])} oracle dialogues of the train split (optimizer steps: "
            f"{number(config['steps'])}, dialogues per step: {number(config['batch_size'])}); SFT loss "
            f"{number(warm['first_loss'])} -> {number(warm['final_loss'])}{speed}; LoRA merged into the model."
        )
    lines += [
        "",
        f"On the train split ({number(rollouts['episodes'])} episodes, {number(rollouts['trials'])} per task, "
        f"sampled at temperature {number(rollouts['temperature'])}): successes {number(rollouts['successes'])}, "
        f"failures {number(rollouts['failures'])}; success rate {interval(rollouts['success'])}, "
        f"mean reward {interval(rollouts['reward'])}.",
        "",
    ]
    return lines


def _per_run(values: list[float | None]) -> str:
    """A capability's statistic over the labelling runs, one value per run."""
    return " / ".join(number(value) for value in values)


def _diagnosis_section(capabilities: dict[str, Any], trained: list[str]) -> list[str]:
    runs = capabilities["params"]["n"]
    lines = [
        "## Diagnosis of the base agent's train-split runs",
        "",
        f"Selected capabilities: {', '.join(f'`{n}`' for n in capabilities['selected']) or 'none'}.",
        "",
        "| capability | coverage per run | Δ | Δ 95% interval | paired Δ (tasks) | runs passed | selected | "
        "adapter trained |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stats in capabilities["capabilities"]:
        name = stats["capability"]["name"]
        ci = "-" if not stats["delta_ci"] else f"[{number(stats['delta_ci'][0])}, {number(stats['delta_ci'][1])}]"
        paired = number(stats["paired_delta"]) + (f" ({stats['paired_tasks']})" if stats["paired_tasks"] else "")
        lines.append(
            f"| `{name}` | {_per_run(stats['cov'])} | {number(stats['delta_mean'])} | {ci} | {paired} | "
            f"{number(stats['runs_passed'])}/{number(runs)} | {'yes' if stats['selected'] else 'no'} | "
            f"{'yes' if name in trained else 'no'} |"
        )
    sources = ", ".join(f"{source} {number(count)}" for source, count in capabilities["failure_sources"].items())
    lines += [
        "",
        f"Failure sources: {sources or '-'}; union coverage of the selected: {number(capabilities['union_coverage'])}.",
    ]
    unselected = [name for name in trained if name not in capabilities["selected"]]
    if unselected:
        lines += [
            "",
            "Trained although not selected (`loop.fallback_capabilities`): "
            + ", ".join(f"`{n}`" for n in unselected)
            + ".",
        ]
    return lines + [""]


def _knobs(knobs: dict[str, Any]) -> str:
    """Knob values as a code span `name=value, ...`; - when there are none."""
    return "`" + ", ".join(f"{name}={value}" for name, value in knobs.items()) + "`" if knobs else "-"


def _adapters_section(root: Path, trained: list[str]) -> list[str]:
    """Each trained adapter: its environment, training, calibration and held-out before/after on
    its own family (artifact.json, calibration.json)."""
    lines = ["## Adapters on their own environments", ""]
    if not trained:
        return lines + ["No adapter was trained.", ""]
    artifacts = {name: read_json(root / "adapters" / name / "artifact.json") for name in trained}
    lines += [
        "| capability | family | knobs | calibrated | GRPO steps | training rollouts | turn budget tokens | "
        "reward per step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, artifact in artifacts.items():
        spec, metrics = artifact["env_spec"], artifact["metrics"]
        calibration = spec["calibration"]
        calibrated = (
            "no" if not calibration.get("calibrated") else "in band" if calibration.get("in_band") else "out of band"
        )
        lines.append(
            f"| `{name}` | `{spec['family']}` | {_knobs(spec['knobs'])} | {calibrated} | {number(metrics['steps'])} | "
            f"{number(metrics['rollouts'])} | {number(metrics['turn_budget_tokens'])} | "
            f"[curve](../adapters/{name}/{CURVE_FILE}) |"
        )
    lines += ["", *_heldout_lines(artifacts), *_calibration_lines(root, trained)]
    return lines


def _heldout_lines(artifacts: dict[str, dict[str, Any]]) -> list[str]:
    """Held-out before -> after GRPO on each adapter's own family, with the paired difference."""
    rows, unscored = [], []
    for name, artifact in artifacts.items():
        metrics = artifact["metrics"]
        if "heldout_difference" not in metrics:
            unscored.append(f"`{name}`")
        for key, difference in metrics.get("heldout_difference", {}).items():
            episodes, metric = key.split("_", 1)
            rows.append(
                f"| `{name}` | {episodes} | {metric} | {number(difference['n'])} | "
                f"{interval(metrics['heldout_before'][key])} | {interval(metrics['heldout_after'][key])} | "
                f"{change(difference)} |"
            )
    lines = ["### Held-out before and after GRPO, on the adapter's own family", ""]
    if rows:
        lines += [
            "Paired by seed (the same held-out seeds before and after): greedy is one greedy episode per seed, "
            "sampled the mean of the seed's sampled episodes.",
            "",
            "| capability | episodes | metric | seeds | before [95% interval] | after [95% interval] | "
            "after minus before [95% interval] |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    if unscored:
        lines += [f"Not scored before and after (`eval.seeds` is 0): {', '.join(unscored)}.", ""]
    return lines


def _calibration_lines(root: Path, trained: list[str]) -> list[str]:
    """The difficulty rungs each adapter's calibration played and the knobs it chose."""
    rows = []
    for name in trained:
        path = root / "adapters" / name / "calibration.json"
        for family in read_json(path)["families"] if path.is_file() else []:
            for point in family["curve"]:
                chosen = "yes" if point["knobs"] == family["knobs"] else "no"
                rows.append(
                    f"| `{name}` | `{family['family']}` | {number(point['ladder_index'])} | {_knobs(point['knobs'])} | "
                    f"{number(point['mean_reward'])} | {number(point['success_rate'])} | {chosen} |"
                )
    if not rows:
        return []
    return [
        "### Calibration",
        "",
        "| capability | family | rung | knobs | mean reward | success rate | chosen |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def _arms_section(arms: dict[str, dict[str, Any]], compared: list[dict[str, Any]]) -> list[str]:
    lines = ["## Held-out split", ""]
    if not arms:
        return lines + ["No arm was evaluated.", ""]
    first = next(iter(arms.values()))
    lines += [
        f"Every arm plays the same {number(first['success']['n'])} held-out tasks once, greedily.",
        "",
        "| arm | success [95% interval] | reward [95% interval] | training rollouts | calibration rollouts | "
        "training s | evaluation s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in arms.items():
        lines.append(
            f"| `{name}` | {interval(m['success'])} | {interval(m['reward'])} | {number(m['rollouts'])} | "
            f"{number(m['calibration_rollouts'])} | {number(m['train_seconds'])} | {number(m['eval_seconds'])} |"
        )
    lines += [
        "",
        "Rollouts: training rollouts are GRPO episodes (the mixture and the task router count every adapter's); "
        "plain GRPO gets at least the adapters' total. Calibration rollouts (measuring the synthetic environments' "
        "difficulty, no weight update) are listed apart and not matched. Training seconds: the arm's own stages "
        "(adapters, router), beyond the base agent. The task router's episodes are those of the arm it routed "
        "each task to (its choices are in its metrics.json).",
        "",
    ]
    lines += ["## Paired differences (bootstrap over held-out tasks)", ""]
    if not compared:
        lines.append("No pair to compare (an arm is missing).")
    for row in compared:
        lines.append(
            f"- `{row['arm']}` minus `{row['versus']}`: success {change(row['success'])}, "
            f"reward {change(row['reward'])}"
        )
    return lines + [""]


def write_report(
    root: Path, arm_names: list[str], trained: list[str], training_logs: dict[str, Path], out_dir: Path, gap: str = ""
) -> list[Path]:
    """Write comparisons.json, the plots and report.md into `out_dir` (with the planted-gap figures
    when the base agent had `gap` planted); returns their paths."""
    arms = {name: read_json(root / "eval" / name / "metrics.json") for name in arm_names}
    compared = comparisons(arms)
    (out_dir / COMPARISONS).write_text(json.dumps(compared, indent=1))
    save(success_figure(arms), out_dir / SUCCESS_PLOT)
    save(reward_figure({name: read_log(folder) for name, folder in training_logs.items()}), out_dir / REWARD_PLOT)
    lines = ["# tracegym loop report", ""]
    lines += _base_agent_section(
        read_json(root / "base_agent" / "base_agent.json"), read_json(root / "trajectories" / "rollouts.json")
    )
    lines += _diagnosis_section(read_json(root / "analysis" / "capabilities.json"), trained)
    lines += _adapters_section(root, trained)
    lines += _arms_section(arms, compared)
    if gap:
        lines += ["## Planted gap", "", "```", *format_gap(gap_figures(root, gap)), "```", ""]
    lines += ["## Plots", "", f"![held-out success]({SUCCESS_PLOT})", "", f"![training reward]({REWARD_PLOT})", ""]
    (out_dir / REPORT).write_text("\n".join(lines), encoding="utf-8")
    return [out_dir / REPORT, out_dir / COMPARISONS, out_dir / SUCCESS_PLOT, out_dir / REWARD_PLOT]
