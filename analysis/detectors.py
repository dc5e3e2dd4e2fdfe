"""Deterministic labellers: dispatch by benchmark and the helpers the per-benchmark detectors share.

Every detector returns one `Verdict` per capability it covers; `label_deterministic` turns them
into `Label` records (labeller "deterministic", run 0) for every (trajectory, capability) pair of
the catalogue, with NA for capabilities the trajectory's benchmark has no detector for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from tracegym.analysis.catalogue import benchmark_family
from tracegym.schema import Capability, Evidence, Label, LabelValue, Trajectory

DETERMINISTIC = "deterministic"
QUOTE_CHARS = 400  # longest quote kept as evidence, in characters (findings state their decisive part first)


@dataclass
class Verdict:
    """One capability's value on one trajectory, with the evidence that decided it."""

    value: LabelValue
    evidence: list[Evidence] = field(default_factory=list)

    @classmethod
    def na(cls) -> Verdict:
        return cls(LabelValue.NA)

    @classmethod
    def lacking(cls, evidence: list[Evidence]) -> Verdict:
        return cls(LabelValue.LACKING, evidence)

    @classmethod
    def present(cls, evidence: list[Evidence] | None = None) -> Verdict:
        return cls(LabelValue.PRESENT, evidence or [])


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def evidence(index: int | None, text: str) -> Evidence:
    return Evidence(message_index=index, quote=quote(text))


def canonical(value: Any) -> str:
    """A comparison key for JSON values: sorted keys, ints and integral floats alike."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{canonical(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    return json.dumps(value, sort_keys=True)


def render(name: str, arguments: dict[str, Any]) -> str:
    """A tool call as `name({...json arguments...})`."""
    return f"{name}({json.dumps(arguments, sort_keys=True)})"


Detector = Callable[[Trajectory], dict[str, Verdict]]


def _detectors() -> dict[str, Detector]:
    from tracegym.analysis import detect_swe, detect_tau

    return {"tau": detect_tau.detect, "swe": detect_swe.detect}


def label_trajectory(trajectory: Trajectory, capabilities: Iterable[Capability]) -> Iterator[Label]:
    """Labels for `trajectory` on each capability; NA where no detector covers the pair."""
    detector = _detectors().get(benchmark_family(trajectory.source.benchmark))
    verdicts = detector(trajectory) if detector else {}
    for capability in capabilities:
        verdict = verdicts.get(capability.name, Verdict.na())
        yield Label(
            trajectory_id=trajectory.id,
            capability=capability.name,
            value=verdict.value,
            evidence=verdict.evidence,
            labeller=DETERMINISTIC,
            run=0,
        )


def label_deterministic(
    trajectories: list[Trajectory], capabilities: list[Capability], progress: bool = False
) -> list[Label]:
    """Deterministic labels for every (trajectory, capability) pair (one labelling run, run 0)."""
    labels: list[Label] = []
    for trajectory in tqdm(trajectories, desc="labelling", unit="traj", disable=not progress):
        labels.extend(label_trajectory(trajectory, capabilities))
    return labels
