"""report.md of the loop, written only from the run's own metric files.

Reads `base_agent/base_agent.json`, `trajectories/rollouts.json`, `analysis/capabilities.json`,
`eval/<arm>/metrics.json` and the training logs; computes the paired comparisons into
`report/comparisons.json` first, then renders every number of report.md from those files (a test
checks that every number in the report occurs in them). Plots: held-out success per arm with its
95% interval, and the training reward curve of each trained arm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tracegym.adapters.grpo import read_log  # noqa: E402
from tracegym.stats import paired_difference  # noqa: E402

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
    return f"{number(stat['mean'])} [{number(stat['low'])}, {number(stat['high'])}]"


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


def success_figure(arms: dict[str, dict[str, Any]], path: Path) -> None:
    names = list(arms)
    means = [arms[n]["success"]["mean"] for n in names]
    errors = [
        [m - arms[n]["success"]["low"] for n, m in zip(names, means)],
        [arms[n]["success"]["high"] - m for n, m in zip(names, means)],
    ]
    figure, axes = plt.subplots(figsize=(max(4.0, 1.2 * len(names)), 3.5))
    axes.bar(names, means, yerr=errors, capsize=4, color="#4c72b0")
    axes.set_ylabel("held-out success rate (95% interval)")
    axes.set_ylim(0, 1)
    axes.tick_params(axis="x", labelrotation=30)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def reward_figure(logs: dict[str, list[dict[str, Any]]], path: Path) -> None:
    figure, axes = plt.subplots(figsize=(5.5, 3.5))
    for name, records in logs.items():
        axes.plot([r["step"] for r in records], [r["reward_mean"] for r in records], marker="o", label=name)
    axes.set_xlabel("GRPO step")
    axes.set_ylabel("mean training reward")
    if logs:
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _base_agent_section(made: dict[str, Any], rollouts: dict[str, Any]) -> list[str]:
    lines = ["## Base agent", ""]
    warm = made["warm_start"]
    if warm is None:
        lines.append(f"`{made['model']}` as it is (no warm start).")
    else:
        config = warm["config"]
        lines.append(
            f"`{made['model']}` warm-started with LoRA SFT (rank {number(config['lora_rank'])}) on {number(warm['dialogues'])} oracle dialogues of the train split "
            f"(optimizer steps: {number(config['steps'])}, dialogues per step: {number(config['batch_size'])}); SFT loss "
            f"{number(warm['first_loss'])} -> {number(warm['final_loss'])}; LoRA merged into the model."
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


def _diagnosis_section(capabilities: dict[str, Any], trained: list[str]) -> list[str]:
    lines = [
        "## Diagnosis of the base agent's train-split runs",
        "",
        "| capability | Δ | Δ 95% interval | selected | adapter trained |",
        "|---|---|---|---|---|",
    ]
    for stats in capabilities["capabilities"]:
        name = stats["capability"]["name"]
        delta = number(stats["delta_mean"])
        ci = "-" if not stats["delta_ci"] else f"[{number(stats['delta_ci'][0])}, {number(stats['delta_ci'][1])}]"
        lines.append(
            f"| `{name}` | {delta} | {ci} | {'yes' if stats['selected'] else 'no'} | {'yes' if name in trained else 'no'} |"
        )
    unselected = [name for name in trained if name not in capabilities["selected"]]
    if unselected:
        lines += [
            "",
            "Trained although not selected (`loop.fallback_capabilities`): "
            + ", ".join(f"`{n}`" for n in unselected)
            + ".",
        ]
    return lines + [""]


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
            f"- `{row['arm']}` minus `{row['versus']}`: success {interval(row['success'])}, "
            f"reward {interval(row['reward'])}"
        )
    return lines + [""]


def write_report(
    root: Path, arm_names: list[str], trained: list[str], training_logs: dict[str, Path], out_dir: Path
) -> list[Path]:
    """Write comparisons.json, the plots and report.md into `out_dir`; returns their paths."""
    arms = {name: read_json(root / "eval" / name / "metrics.json") for name in arm_names}
    compared = comparisons(arms)
    (out_dir / COMPARISONS).write_text(json.dumps(compared, indent=1))
    success_figure(arms, out_dir / SUCCESS_PLOT)
    reward_figure({name: read_log(folder) for name, folder in training_logs.items()}, out_dir / REWARD_PLOT)
    lines = ["# tracegym loop report", ""]
    lines += _base_agent_section(
        read_json(root / "base_agent" / "base_agent.json"), read_json(root / "trajectories" / "rollouts.json")
    )
    lines += _diagnosis_section(read_json(root / "analysis" / "capabilities.json"), trained)
    lines += _arms_section(arms, compared)
    lines += ["## Plots", "", f"![held-out success]({SUCCESS_PLOT})", "", f"![training reward]({REWARD_PLOT})", ""]
    (out_dir / REPORT).write_text("\n".join(lines), encoding="utf-8")
    return [out_dir / REPORT, out_dir / COMPARISONS, out_dir / SUCCESS_PLOT, out_dir / REWARD_PLOT]
