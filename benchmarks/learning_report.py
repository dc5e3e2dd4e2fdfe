"""benchmarks/learning.py's paired comparisons, printed table and training-curve plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tracegym.adapters.heldout import METRICS  # noqa: E402
from tracegym.stats import paired_difference  # noqa: E402
from tracegym.synth_envs.calibration import CalibrationConfig  # noqa: E402


def mean_after(runs: Sequence[dict[str, Any]], metric: str) -> list[float]:
    """Per held-out seed, the mean of `metric` over the training runs (all scored on the same seeds)."""
    return np.mean([run["after"][metric] for run in runs], axis=0).tolist()


def summarise(family: dict[str, Any], credits: Sequence[str]) -> dict[str, Any]:
    """Paired differences per held-out seed: each credit's after minus the warm start's, and the first
    credit minus the second; whether the warm start's mean reward lies in the calibration band."""
    before = family["before"]
    metrics = [m for m in METRICS if before[m]]
    after = {
        credit: {m: mean_after([r for r in family["runs"] if r["credit"] == credit], m) for m in metrics}
        for credit in credits
    }
    band = CalibrationConfig()
    warm_reward = float(np.mean(before["sampled_reward"] or before["greedy_reward"]))
    first, second = credits
    return {
        "warm_start_reward": warm_reward,
        "warm_start_in_band": band.low <= warm_reward <= band.high,
        "band": [band.low, band.high],
        "after_minus_before": {c: {m: paired_difference(before[m], after[c][m]) for m in metrics} for c in credits},
        f"{first}_minus_{second}": {m: paired_difference(after[second][m], after[first][m]) for m in metrics},
    }


def interval_text(d: dict[str, float]) -> str:
    """`+0.123 [+0.010, +0.240]`, with ` *` when the 95% interval excludes 0."""
    mark = " *" if d["low"] > 0 or d["high"] < 0 else ""
    return f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]{mark}"


def report(result: dict[str, Any]) -> None:
    """Print, per family, held-out means before and after and the paired differences (* : the 95%
    interval excludes 0)."""
    first, second = result["credits"]
    settings = result["settings"]
    for family in result["families"]:
        comparison, before = family["comparison"], family["before"]["summary"]
        rollouts = "; ".join(
            f"{credit} {[r['rollouts'] for r in family['runs'] if r['credit'] == credit]}"
            for credit in result["credits"]
        )
        print(
            f"\n{family['family']} {family['knobs']}: {settings['seeds']} training seeds per credit, "
            f"rollouts per run ({settings.get('redraws', 0)} redraw rounds a step) {rollouts}, lr {result['lr']}, "
            f"{before['greedy_reward']['n']} held-out seeds, "
            f"{sum(r['train_seconds'] for r in family['runs']) / 60:.1f} min of GRPO steps, "
            f"{family['seconds'] / 60:.1f} min wall (less any work reused from the folder)"
        )
        print(
            f"warm start mean reward {comparison['warm_start_reward']:.3f} "
            f"({'in' if comparison['warm_start_in_band'] else 'NOT in'} band {comparison['band']})"
        )
        for metric, base in before.items():
            print(f"  {metric:16s} before {base['mean']:.3f}")
            for credit in result["credits"]:
                print(
                    f"  {'':16s} {credit:5s} after - before "
                    f"{interval_text(comparison['after_minus_before'][credit][metric])}"
                )
            print(
                f"  {'':16s} {first} - {second}        {interval_text(comparison[f'{first}_minus_{second}'][metric])}"
            )


def plot_curves(result: dict[str, Any], path: Path) -> None:
    """Training reward per step, one panel per family: each run thin, each credit's mean thick."""
    families = result["families"]
    fig, axes = plt.subplots(1, len(families), figsize=(5 * len(families), 3.5), squeeze=False)
    for ax, family in zip(axes[0], families):
        for index, credit in enumerate(result["credits"]):
            curves = [r["train_reward"] for r in family["runs"] if r["credit"] == credit]
            color = f"C{index}"
            for curve in curves:
                ax.plot(range(1, len(curve) + 1), curve, color=color, alpha=0.3, linewidth=0.8)
            mean = np.mean(curves, axis=0)
            ax.plot(range(1, len(mean) + 1), mean, color=color, linewidth=2, label=f"{credit} (mean of {len(curves)})")
        ax.set_title(family["family"])
        ax.set_xlabel("GRPO step")
        ax.set_ylabel("training reward (mean of the step's rollouts)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
