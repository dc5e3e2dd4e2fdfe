"""SWE-bench runs in the layout of the SWE-bench experiments repository (one submission folder).

    <submission>/results/results.json   {"resolved": [instance ids], "no_generation": [...], ...}
    <submission>/trajs/                  one trajectory per instance: <id>.traj, <id>.json, <id>.traj.json,
                                         or <id>/<id>.traj.json
    <submission>/logs/<id>/report.json   optional harness report (test results); logs/<id>/patch.diff
    <submission>/all_preds.jsonl         optional predictions {instance_id, model_patch}
    <submission>/metadata.yaml           optional; its `name` names the agent

An instance is resolved when results.json lists it as resolved (the report, when present, only
adds the test results; a report that disagrees is flagged, results.json kept). A trajectory is
read from mini-swe-agent `messages`, or from SWE-agent `trajectory` steps (thought, action,
observation; the action becomes a bash block, the observation the next user message; the issue
text from the first user turn of `history`). Every
trajectory file that cannot be read, and every listed instance without one, is a skipped record.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tracegym.analysis.ingest.common import (
    Batch,
    IngestError,
    InputFile,
    JsonProblem,
    RecordError,
    decode_json,
    load_json,
    openai_content,
    openai_messages,
    read_text,
    validate,
)
from tracegym.analysis.ingest.swebench import BENCHMARK, HarnessReport, harness_report, swe_trajectory
from tracegym.schema import Message, Source, Trajectory

FORMAT = "swebench_experiments"
RESULTS = Path("results") / "results.json"
_SUFFIX = re.compile(r"(\.traj)?\.(json|traj|jsonl|md|txt|log|yaml|yml)$")


class _Results(BaseModel):
    resolved: list[str]


class _Step(BaseModel):
    action: str = ""
    observation: str = ""
    thought: str = ""


def sniff(file: InputFile) -> bool:
    """Only submission folders are in this layout (a file never is)."""
    return False


def read(file: InputFile) -> Batch:
    raise RecordError("", "a SWE-bench experiments submission is a folder with results/results.json and trajs/")


def is_run_dir(path: Path) -> bool:
    """A submission folder has `results/results.json` and `trajs/`."""
    return (path / RESULTS).is_file() and (path / "trajs").is_dir()


def instance_id(path: Path, trajs: Path) -> str:
    """The instance a trajectory file belongs to: its name without the suffixes, or its folder's name."""
    return path.parent.name if path.parent != trajs else _SUFFIX.sub("", path.name)


def read_run(path: Path) -> Batch:
    """Every instance of a submission folder that has a trajectory; the rest are skipped records."""
    batch = Batch(str(path), FORMAT)
    listed = load_json(path / RESULTS)
    try:
        resolved = set(validate(_Results, listed, "").resolved)
    except RecordError as error:
        raise IngestError(path / RESULTS, error.json_path, error.reason) from None
    source = Source.model_construct(benchmark=BENCHMARK, format=FORMAT, file=str(path), agent=_agent(path), model="")
    patches = _predictions(path, batch)
    trajs = path / "trajs"
    seen: set[str] = set()
    for file in sorted(p for p in trajs.rglob("*") if p.is_file() and not p.name.startswith(".")):
        instance = instance_id(file, trajs)
        if file.suffix not in (".json", ".traj", ".jsonl"):
            batch.skip(
                "",
                f"a {file.suffix or 'suffix-less'} trajectory of {instance}: only JSON trajectories are read "
                "(mini-swe-agent messages, SWE-agent steps)",
                str(file),
            )
            continue
        try:
            trajectory = _read_one(file, instance, path, source, instance in resolved, patches.get(instance, ""), batch)
        except IngestError as error:
            batch.skip(error.json_path, error.reason, error.path)
            continue
        if instance in seen:
            batch.skip("", f"a second trajectory for {instance}; the first one read is kept", str(file))
            continue
        seen.add(instance)
        batch.trajectories.append(trajectory)
    for name, ids in listed.items():
        for missing in sorted(set(ids if isinstance(ids, list) else []) - seen):
            batch.skip(
                f"{name}",
                f"{missing} is listed in results.json ({name}) but has no trajectory in trajs/",
                str(path / RESULTS),
            )
            seen.add(missing)
    return batch


def _agent(path: Path) -> str:
    """The submission's name from metadata.yaml, else the folder name."""
    metadata = path / "metadata.yaml"
    if metadata.is_file():
        import yaml  # only submissions that carry metadata need it

        try:
            loaded = yaml.safe_load(read_text(metadata))
        except yaml.YAMLError:
            loaded = None
        if isinstance(loaded, dict) and isinstance(loaded.get("name"), str):
            return loaded["name"]
    return path.name


def _predictions(path: Path, batch: Batch) -> dict[str, str]:
    """{instance id: submitted patch} from all_preds.jsonl (bad lines are skipped records)."""
    file = path / "all_preds.jsonl"
    if not file.is_file():
        return {}
    patches = {}
    for number, line in enumerate(read_text(file).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = decode_json(line)
        except JsonProblem as problem:
            batch.skip(f"line {number}", problem.in_record("").reason, str(file))
            continue
        if (
            isinstance(record, dict)
            and isinstance(record.get("instance_id"), str)
            and isinstance(record.get("model_patch"), (str, type(None)))
        ):
            patches[record["instance_id"]] = record.get("model_patch") or ""
        else:
            batch.skip(f"line {number}", "a prediction needs instance_id and model_patch", str(file))
    return patches


def _read_one(
    file: Path, instance: str, run: Path, source: Source, resolved: bool, predicted: str, batch: Batch
) -> Trajectory:
    document = load_json(file)
    if not isinstance(document, dict):
        raise IngestError(file, "", "a trajectory file should hold a JSON object")
    try:
        messages, statement = _messages(document)
    except RecordError as error:
        raise IngestError(file, error.json_path, error.reason) from None
    info = document.get("info") if isinstance(document.get("info"), dict) else {}
    report = _report(run, instance, resolved, batch)
    diff = run / "logs" / instance / "patch.diff"
    patch = (
        info.get("submission")
        if isinstance(info.get("submission"), str)
        else predicted or (read_text(diff) if diff.is_file() else "")
    )
    status = info.get("exit_status") if isinstance(info.get("exit_status"), str) else None
    trajectory = swe_trajectory(
        run.name, instance, source.model_copy(update={"file": str(file)}), messages, resolved, patch, report, status
    )
    if statement is not None:
        trajectory.metadata["problem_statement"] = statement
    return trajectory


def _messages(document: dict[str, Any]) -> tuple[list[Message], str | None]:
    """mini-swe-agent `messages` (the problem statement is found in them), or SWE-agent `trajectory`
    steps turned into messages, with the issue from the first user turn of `history` ("" without)."""
    if isinstance(document.get("messages"), list):
        return openai_messages(document["messages"], "messages"), None
    steps = document.get("trajectory")
    if not isinstance(steps, list):
        keys = ", ".join(list(document)[:6]) or "none"
        raise RecordError("", f"not a trajectory this layout reads: no `messages` or `trajectory` list (keys: {keys})")
    messages = []
    for index, raw in enumerate(steps):
        step = validate(_Step, raw, f"trajectory[{index}]")
        action = f"\n\n```bash\n{step.action.strip()}\n```" if step.action.strip() else ""
        messages.append(Message(role="assistant", content=step.thought.strip() + action))
        messages.append(Message(role="user", content=step.observation))
    history = document.get("history") if isinstance(document.get("history"), list) else []
    asked = [
        openai_content(h.get("content"), "history") for h in history if isinstance(h, dict) and h.get("role") == "user"
    ]
    return messages, asked[0] if asked else ""


def _report(run: Path, instance: str, resolved: bool, batch: Batch) -> HarnessReport | None:
    file = run / "logs" / instance / "report.json"
    if not file.is_file():
        return None
    try:
        report = harness_report(load_json(file), instance, "")
    except RecordError as error:
        raise IngestError(file, error.json_path, error.reason) from None
    if report.resolved != resolved:
        batch.flag(
            [str(file), str(run / RESULTS)],
            f"report.json says resolved={report.resolved} for {instance}, "
            f"results.json says {resolved}; results.json kept",
        )
    return report
