"""mini-swe-agent SWE-bench runs: a run folder `trajs/<id>/<id>.traj.json` + `logs/<id>/report.json`.

A single `.traj.json` file is read too; its report is looked up in the run folder around it
(`../../logs/<id>/report.json`). A trajectory without its report is a skipped record: the verdict
is the point of ingesting it. Cross-reference check: the instance id inside the file names the
folder it sits in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tracegym.analysis.ingest.common import (
    Batch,
    IngestError,
    InputFile,
    RecordError,
    load_json,
    openai_messages,
    validate,
)
from tracegym.analysis.ingest.swebench import BENCHMARK, harness_report, swe_trajectory
from tracegym.schema import Source, Trajectory

FORMAT = "mini_swe_agent"


class _Info(BaseModel):
    exit_status: str | None = None
    submission: str | None = None
    mini_version: str = ""
    config: dict[str, Any] = {}


class _Traj(BaseModel):
    instance_id: str
    info: _Info
    messages: list[Any]


def sniff(file: InputFile) -> bool:
    """A mini-swe-agent trajectory declares `trajectory_format: mini-swe-agent-*`."""
    document = file.document()
    return isinstance(document, dict) and str(document.get("trajectory_format", "")).startswith("mini-swe-agent")


def is_run_dir(path: Path) -> bool:
    """A run folder has `trajs/` and `logs/` beside each other."""
    return (path / "trajs").is_dir() and (path / "logs").is_dir()


def read_run(path: Path) -> Batch:
    """Every trajectory of a run folder, each with its harness report."""
    batch = Batch(str(path), FORMAT)
    for traj_file in sorted((path / "trajs").glob("*/*.traj.json")):
        try:
            batch.trajectories.append(_read_one(traj_file, load_json(traj_file), path, batch))
        except IngestError as error:
            batch.skip(error.json_path, error.reason, error.path)
    return batch


def read(file: InputFile) -> Batch:
    """One `.traj.json` file given on its own."""
    path = file.path
    batch = Batch(str(path), FORMAT)
    batch.trajectories.append(_read_one(path, file.json(), path.parent.parent.parent, batch))
    return batch


def _read_one(traj_file: Path, document: Any, run_dir: Path, batch: Batch) -> Trajectory:
    try:
        traj = validate(_Traj, document, "")
        messages = openai_messages(traj.messages, "messages")
    except RecordError as error:
        raise IngestError(traj_file, error.json_path, error.reason) from None
    instance_id = traj.instance_id
    if traj_file.parent.name != instance_id and traj_file.parent.parent.name == "trajs":
        batch.flag(
            [str(traj_file)], f"instance_id {instance_id!r} differs from its folder name {traj_file.parent.name!r}"
        )
    report_file = run_dir / "logs" / instance_id / "report.json"
    if not report_file.is_file():
        raise IngestError(
            traj_file, "instance_id", f"missing report file {report_file} (the harness verdict for {instance_id})"
        )
    try:
        report = harness_report(load_json(report_file), instance_id, "")
    except RecordError as error:
        raise IngestError(report_file, error.json_path, error.reason) from None
    config = traj.info.config
    source = Source.model_construct(
        benchmark=BENCHMARK,
        format=FORMAT,
        file=str(traj_file),
        agent=f"mini-swe-agent {traj.info.mini_version}".strip(),
        model=str(model.get("model_name", "")) if isinstance(model := config.get("model"), dict) else "",
    )
    return swe_trajectory(
        run_dir.name,
        instance_id,
        source,
        messages,
        report.resolved,
        traj.info.submission,
        report,
        traj.info.exit_status,
        "info.submission",
    )
