"""The records every stage reads and writes: trajectories, capability labels and reports, env specs.

All models are pydantic v2. Trajectories round-trip through JSONL (`write_jsonl` / `read_jsonl`)
and through Hugging Face `datasets` (`to_dataset` / `from_dataset`, nested fields as JSON text so
that heterogeneous `diagnostics` survive Arrow's strict typing).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, Field

from tracegym.files import atomic_open

if TYPE_CHECKING:
    import datasets

Role = Literal["system", "user", "assistant", "tool"]
CreditKind = Literal["trace", "grpo"]  # turn credit: TRACE's, or the plain GRPO outcome advantage


class ToolCall(BaseModel):
    """One function call made by an assistant (or, in τ² telecom, by the simulated user)."""

    id: str = ""
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Message(BaseModel):
    """One chat message. A `tool` message answers the call whose id is `tool_call_id`."""

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    error: bool = False


class Source(BaseModel):
    """Where a trajectory came from: benchmark, ingest format, file, agent and model names."""

    benchmark: str
    format: str
    file: str
    agent: str = ""
    model: str = ""


class Trajectory(BaseModel):
    """One run of an agent on one task.

    `reward` is the benchmark's reward in [0, 1] (None when the benchmark could not grade it);
    `success` is the benchmark's pass/fail verdict. `diagnostics` keeps the benchmark's own
    verdict details (τ² `reward_info`, gold actions; SWE-bench FAIL_TO_PASS / PASS_TO_PASS results)
    untouched, because they are the best evidence there is.
    """

    id: str
    task_id: str
    trial: int = 0
    source: Source
    messages: list[Message] = Field(default_factory=list)
    reward: float | None = None
    success: bool = False
    termination_reason: str | None = None
    diagnostics: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


class LabelValue(StrEnum):
    """NA: the task does not need the capability; PRESENT: needed and shown; LACKING: needed, not shown."""

    PRESENT = "PRESENT"
    LACKING = "LACKING"
    NA = "NA"


class Evidence(BaseModel):
    """A pointer into a trajectory (message index, None for run-level evidence) and a short quote."""

    message_index: int | None = None
    quote: str = ""


class Capability(BaseModel):
    """A general agent capability: snake_case name, 2-3 sentence description, example task ids."""

    name: str
    description: str
    examples: list[str] = Field(default_factory=list)
    origin: Literal["catalogue", "proposed"] = "catalogue"
    benchmarks: list[str] = Field(default_factory=list)


class Label(BaseModel):
    """One labeller's verdict on one (trajectory, capability) pair in one labelling run."""

    trajectory_id: str
    capability: str
    value: LabelValue
    evidence: list[Evidence] = Field(default_factory=list)
    labeller: str
    run: int = 0


class CapabilityStats(BaseModel):
    """Selection statistics of one capability over N labelling runs (docs/method.md, "Capability selection")."""

    capability: Capability
    cov: list[float | None]
    er_minus: list[float | None]
    er_plus: list[float | None]
    delta: list[float | None]
    runs_passed: int
    selected: bool
    delta_mean: float | None = None
    delta_ci: tuple[float, float] | None = None
    paired_delta: float | None = None
    paired_tasks: int = 0
    explained_failures: list[dict[str, Any]] = Field(default_factory=list)


class CapabilityReport(BaseModel):
    """What `tracegym diagnose` writes as capabilities.json; `selected` is sorted by mean Δ."""

    capabilities: list[CapabilityStats]
    selected: list[str]
    union_coverage: float | None = None
    possible_benchmark_errors: list[dict[str, Any]] = Field(default_factory=list)
    failure_sources: dict[str, int] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    inputs: list[str] = Field(default_factory=list)

    def selected_capabilities(self) -> list[Capability]:
        by_name = {s.capability.name: s.capability for s in self.capabilities}
        return [by_name[name] for name in self.selected]


class EnvSpec(BaseModel):
    """A calibrated environment for one capability: the family, its knob values and seed ranges."""

    capability: str
    family: str
    knobs: dict[str, Any] = Field(default_factory=dict)
    train_seeds: tuple[int, int] = (0, 10_000)
    eval_seeds: tuple[int, int] = (1_000_000, 1_000_200)
    calibration: dict[str, Any] = Field(default_factory=dict)


class AdapterArtifact(BaseModel):
    """A trained LoRA adapter on disk (standard PEFT layout) and how it was made."""

    capability: str
    path: str
    base_model: str
    env_spec: EnvSpec
    credit: CreditKind
    metrics: dict[str, Any] = Field(default_factory=dict)


Record = TypeVar("Record", bound=BaseModel)


def write_jsonl(records: Iterable[BaseModel], path: str | Path) -> int:
    """Write one JSON object per line; returns the number written. Written atomically."""
    with atomic_open(path) as handle:
        return dump_jsonl(records, handle)


def dump_jsonl(records: Iterable[BaseModel], handle: IO[str]) -> int:
    """Write one JSON object per line to an open text file; returns the number written."""
    count = 0
    for record in records:
        handle.write(record.model_dump_json())
        handle.write("\n")
        count += 1
    return count


def read_jsonl(path: str | Path, model: type[Record] = Trajectory) -> Iterator[Record]:
    """Yield records of `model` from a JSONL file, naming the file and line on a bad record."""
    with Path(path).open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield model.model_validate_json(line)
            except ValueError as error:
                raise ValueError(f"{path}:{line_number}: not a valid {model.__name__}: {error}") from error


_JSON_FIELDS = ("source", "messages", "diagnostics", "metadata")


def to_dataset(trajectories: Iterable[Trajectory]) -> datasets.Dataset:
    """A `datasets.Dataset` with one row per trajectory; nested fields are stored as JSON text."""
    import datasets

    rows = []
    for trajectory in trajectories:
        row = trajectory.model_dump(mode="json")
        for field in _JSON_FIELDS:
            row[field] = json.dumps(row[field])
        rows.append(row)
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "task_id": datasets.Value("string"),
            "trial": datasets.Value("int64"),
            "source": datasets.Value("string"),
            "messages": datasets.Value("string"),
            "reward": datasets.Value("float64"),
            "success": datasets.Value("bool"),
            "termination_reason": datasets.Value("string"),
            "diagnostics": datasets.Value("string"),
            "metadata": datasets.Value("string"),
        }
    )
    return datasets.Dataset.from_list(rows, features=features)


def from_dataset(dataset: datasets.Dataset) -> list[Trajectory]:
    """Inverse of `to_dataset`."""
    trajectories = []
    for row in dataset:
        row = dict(row)
        for field in _JSON_FIELDS:
            row[field] = json.loads(row[field])
        trajectories.append(Trajectory.model_validate(row))
    return trajectories
