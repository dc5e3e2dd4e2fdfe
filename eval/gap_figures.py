"""The figures of a loop run with a planted gap, read from its run directory, one per link of the chain.

A planted gap (`base_agent.gap`) is a known answer: the base agent was warm-started on dialogues
that show one capability's characteristic mistake in the task kinds exercising it. The figures say
whether each link held:

- selection: the diagnosis's selected set against the planted capability (recall, precision);
- the gap itself: the no-gap base agent minus the gapped one, on the gap's kinds and on the others
  (the gap should cost on its kinds and nothing elsewhere);
- each adapter on its own synthetic family (held-out before and after GRPO, paired);
- each adapter on the target: minus the base agent, on the gap's kinds and on the others;
- the loop: mixture minus base and mixture minus plain GRPO on every held-out task.

Differences are of held-out success (0/1 per task, greedy), paired by task, with 95% bootstrap
intervals as `{mean, low, high, n}` (`tracegym.stats.paired_difference`); a comparison whose arms
were not evaluated (no adapter trained, plain GRPO off) is None.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracegym.eval.arms import METRICS_FILE, adapter_arm
from tracegym.eval.target.kinds import CAPABILITIES
from tracegym.stats import paired_difference

NOGAP_ARM = "base_nogap"  # the arm of the base agent warm-started without the planted gap


def gap_kinds(capability: str) -> list[str]:
    """The target's task kinds that exercise `capability`."""
    return sorted(kind for kind, capabilities in CAPABILITIES.items() if capability in capabilities)


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _difference(arms: dict[str, Any], first: str, second: str, kinds: set[str] | None = None) -> dict | None:
    """Paired success difference `first − second` over the held-out tasks (of `kinds` only, when given)."""
    if first not in arms or second not in arms:
        return None
    a, b = arms[first]["per_seed"], arms[second]["per_seed"]
    if a["seeds"] != b["seeds"]:
        raise ValueError(f"arms {first} and {second} were scored on different held-out tasks")
    keep = [i for i, kind in enumerate(a["kinds"]) if kinds is None or kind in kinds]
    if not keep:
        return None
    return paired_difference([b["success"][i] for i in keep], [a["success"][i] for i in keep])


def _by_kinds(arms: dict[str, Any], first: str, second: str, gap: set[str]) -> dict[str, dict | None]:
    other = {kind for kind in CAPABILITIES if kind not in gap}
    return {"gap_kinds": _difference(arms, first, second, gap), "other_kinds": _difference(arms, first, second, other)}


def _arm_costs(metrics: dict[str, Any]) -> dict[str, Any]:
    keys = ("rollouts", "calibration_rollouts", "train_seconds", "eval_seconds")
    return {"success": metrics["success"], **{key: metrics.get(key) for key in keys}}


def gap_figures(root: Path, gap: str) -> dict[str, Any]:
    """The figures of the run directory `root` whose base agent had `gap` planted (see the module)."""
    report = _read(root / "analysis" / "capabilities.json") or {}
    selected = list(report.get("selected", []))
    arms = {
        folder.name: metrics
        for folder in sorted((root / "eval").glob("*"))
        if (metrics := _read(folder / METRICS_FILE)) is not None
    }
    kinds = set(gap_kinds(gap))
    adapters = {}
    for folder in sorted((root / "adapters").glob("*")):
        artifact = _read(folder / "artifact.json")
        if artifact is None:
            continue
        capability = artifact["capability"]
        adapters[capability] = {
            "family": artifact["env_spec"]["family"],
            "own_family": artifact["metrics"].get("heldout_difference"),
            "on_target_minus_base": _by_kinds(arms, adapter_arm(capability), "base", kinds),
        }
    routed = _read(root / "router" / "routed" / "metrics.json") or {}
    heldout = len(arms["base"]["per_seed"]["seeds"]) if "base" in arms else 0
    return {
        "planted": gap,
        "gap_kinds": sorted(kinds),
        "selected": selected,
        "recall": float(gap in selected),
        "precision": (float(gap in selected) / len(selected)) if selected else None,
        "heldout_tasks": heldout,
        "nogap_minus_base": _by_kinds(arms, NOGAP_ARM, "base", kinds),
        "mixture_minus_base": _difference(arms, "mixture", "base"),
        "mixture_minus_plain_grpo": _difference(arms, "mixture", "plain_grpo"),
        "mixture_minus_base_by_kinds": _by_kinds(arms, "mixture", "base", kinds),
        "adapters": adapters,
        "token_router_heldout": (routed.get("token_router") or {}).get("heldout"),
        "arms": {name: _arm_costs(metrics) for name, metrics in arms.items()},
        "stage_seconds": {
            name: stage.get("seconds") for name, stage in ((_read(root / "run.json") or {}).get("stages") or {}).items()
        },
    }


def _interval(difference: dict[str, float] | None) -> str:
    return (
        "-"
        if difference is None
        else f"{difference['mean']:+.3f} [{difference['low']:+.3f}, {difference['high']:+.3f}]"
    )


def format_gap(figures: dict[str, object]) -> list[str]:
    """The planted-gap lines of the closing table: planted against selected, then the paired
    held-out success differences that locate a failed link."""
    selected = ", ".join(figures["selected"]) or "none"
    precision = "-" if figures["precision"] is None else f"{figures['precision']:.2f}"
    nogap, mixture = figures["nogap_minus_base"], figures["mixture_minus_base_by_kinds"]
    return [
        f"planted gap: {figures['planted']} (kinds {', '.join(figures['gap_kinds'])}); selected: {selected}; "
        f"recall {figures['recall']:.0f}, precision {precision}",
        f"held-out success, paired by task ({figures['heldout_tasks']} tasks): difference [95% interval]",
        f"  no-gap base - base     gap kinds {_interval(nogap['gap_kinds'])}"
        f"   other kinds {_interval(nogap['other_kinds'])}",
        f"  mixture - base         gap kinds {_interval(mixture['gap_kinds'])}"
        f"   other kinds {_interval(mixture['other_kinds'])}   all {_interval(figures['mixture_minus_base'])}",
        f"  mixture - plain GRPO   all {_interval(figures['mixture_minus_plain_grpo'])}",
    ]
