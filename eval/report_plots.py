"""The loop report's plots, built as matplotlib Figures (no pyplot state) and saved as PNG.

Every plot has a title, axis labels kept inside the image by constrained layout, and the arms'
readable names (`arm_label`). `success_figure` writes each arm's held-out success rate next to
its bar, bars at zero included; `reward_figure` draws one panel per trained arm with whole-number
GRPO steps on its x axis.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

ADAPTER_PREFIX = "adapter_"
LABELS = {
    "base": "base agent",
    "base_nogap": "base agent without the gap",
    "task_router": "task router",
    "mixture": "mixture (token router)",
    "plain_grpo": "plain GRPO",
}
COLOURS = {"base": "#8c8c8c", "adapter": "#4c72b0", "router": "#dd8452", "plain": "#55a868"}
DPI = 120
PANEL_COLUMNS = 3


def arm_label(name: str) -> str:
    """A readable name for an arm: `adapter_policy_compliance` is "adapter: policy compliance"."""
    if name in LABELS:
        return LABELS[name]
    if name.startswith(ADAPTER_PREFIX):
        return "adapter: " + name[len(ADAPTER_PREFIX) :].replace("_", " ")
    return name.replace("_", " ")


def _figure(width: float, height: float) -> Figure:
    """A constrained-layout Figure of `width` x `height` inches on its own Agg canvas."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _colour(name: str) -> str:
    if name.startswith(ADAPTER_PREFIX):
        return COLOURS["adapter"]
    if name in ("task_router", "mixture"):
        return COLOURS["router"]
    return COLOURS["plain"] if name == "plain_grpo" else COLOURS["base"]


def success_figure(arms: dict[str, dict[str, Any]]) -> Figure:
    """Horizontal bars of each arm's held-out success rate (metrics.json's `success`: mean, low,
    high, n) with its 95% interval, the first arm on top, the mean written after each interval."""
    names = list(arms)
    stats = [arms[name]["success"] for name in names]
    figure = _figure(7.5, 1.4 + 0.45 * len(names))
    axes = figure.add_subplot()
    rows = list(range(len(names)))
    errors = [[s["mean"] - s["low"] for s in stats], [s["high"] - s["mean"] for s in stats]]
    axes.barh(rows, [s["mean"] for s in stats], xerr=errors, capsize=3, height=0.6, color=[_colour(n) for n in names])
    for row, stat in zip(rows, stats):
        axes.annotate(
            f"{stat['mean']:.3f}",
            (stat["high"], row),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize="small",
        )
    axes.set_yticks(rows, [arm_label(name) for name in names])
    axes.invert_yaxis()
    axes.set_xlim(0, 1.15)  # room for the value after an interval that reaches 1
    axes.set_xticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    axes.set_xlabel("success rate (bar: mean, whiskers: 95% interval)")
    axes.grid(axis="x", alpha=0.3)
    axes.set_axisbelow(True)
    tasks = f"{stats[0]['n']} tasks, " if stats else ""
    axes.set_title(f"Held-out success per arm ({tasks}greedy)")
    return figure


def reward_figure(logs: dict[str, list[dict[str, Any]]]) -> Figure:
    """One panel per trained arm: mean training reward (train_log.jsonl's `reward_mean`) at each
    GRPO step, whole-number step ticks, one reward scale shared by all panels."""
    trained = {name: records for name, records in logs.items() if records}
    columns = min(PANEL_COLUMNS, max(1, len(trained)))
    panels = math.ceil(len(trained) / columns) if trained else 1
    figure = _figure(3.4 * columns + 0.6, 2.7 * panels + 0.7)
    grid = list(figure.subplots(panels, columns, sharey=True, squeeze=False).flat)
    figure.suptitle("Mean training reward per GRPO step")
    if not trained:
        grid[0].set_axis_off()
        grid[0].text(0.5, 0.5, "no arm was trained", ha="center", va="center", transform=grid[0].transAxes)
        return figure
    rewards = [r["reward_mean"] for records in trained.values() for r in records]
    low, high = min(0.0, *rewards), max(1.0, *rewards)
    for index, (axes, (name, records)) in enumerate(zip(grid, trained.items())):
        steps = [r["step"] for r in records]
        axes.plot(steps, [r["reward_mean"] for r in records], marker="o", color=_colour(name))
        axes.set_title(arm_label(name), fontsize="medium")
        axes.set_xlim(min(steps) - 0.5, max(steps) + 0.5)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        axes.set_ylim(low - 0.05, high + 0.05)
        axes.set_xlabel("GRPO step")
        if index % columns == 0:
            axes.set_ylabel("mean training reward")
        axes.grid(alpha=0.3)
    for axes in grid[len(trained) :]:  # the panels left over in the last row
        axes.set_visible(False)
    return figure


def save(figure: Figure, path: Path) -> Path:
    """Write `figure` as a PNG at `path`; returns `path`."""
    figure.savefig(path, dpi=DPI)
    return path
