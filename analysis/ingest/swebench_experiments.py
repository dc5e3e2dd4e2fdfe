"""SWE-bench runs in the layout of the SWE-bench experiments repository (one submission folder).

    <submission>/results/results.json   {"resolved": [instance ids], "no_generation": [...], ...}
    <submission>/trajs/                  optional; per instance <id>.traj, <id>.json, <id>.traj.json, or a
                                         folder <id>/ holding <id>.traj(.json) or <model>_<time>.json
    <submission>/logs/<id>/report.json   optional harness report (test results); logs/<id>/patch.diff
    <submission>/all_preds.jsonl         optional predictions {instance_id, model_patch}
    <submission>/metadata.yaml           optional; its `name` names the agent

An instance is resolved when results.json lists it as resolved (the report, when present, only
adds the test results; a report that disagrees is flagged, results.json kept). Trajectories are
read in these kinds (`metadata.trajectory_format`):
- "mini-swe-agent": `trajectory_format: mini-swe-agent-*` with `messages` (actions in bash blocks);
- "openhands": a logged completion (`messages` with `response`, `kwargs` or `fncall_messages`), read
  by `openhands.conversation` (structured calls preferred, else the text calls); of several
  completion files in one instance folder (named after their time) the latest is read, the earlier
  ones being prefixes of the same conversation; any other `messages` list is read the same way ("chat");
- "swe-agent": SWE-agent `trajectory` steps (thought, action, observation; the action becomes a
  bash block, the observation the next user message), after the first user turn of `history`;
- "none": a patch-only submission (no trajs/): one verdict-only record (no messages) per instance
  named by results.json, all_preds.jsonl or logs/, and one skipped record saying so.
The patch comes from all_preds.jsonl, the trajectory (`info.submission`) or logs/<id>/patch.diff, an
empty one from results.json's `no_generation`; with none of these it is unknown (None), never empty.
Every trajectory file that cannot be read, every instance folder without a JSON trajectory and
every listed instance without one is a skipped record naming the file and what is wrong.
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
from tracegym.analysis.ingest.openhands import completion_stem, completion_time, conversation, latest_completion
from tracegym.analysis.ingest.swebench import (
    BENCHMARK,
    HarnessReport,
    harness_report,
    problem_statement,
    swe_trajectory,
)
from tracegym.schema import Message, Source, Trajectory

FORMAT = "swebench_experiments"
RESULTS = Path("results") / "results.json"
_SUFFIX = re.compile(r"(\.traj)?\.(json|traj|jsonl|md|txt|log|yaml|yml)$")
_TRAJECTORY_SUFFIXES = (".json", ".traj", ".jsonl")
_BESIDE_RESULTS = ("trajs", "logs", "all_preds.jsonl", "metadata.yaml")
_COMPLETION_KEYS = ("fncall_messages", "response", "kwargs")
NO_GENERATION = "no_generation"


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
    raise RecordError("", "a SWE-bench experiments submission is a folder with results/results.json")


def is_run_dir(path: Path) -> bool:
    """A submission folder has `results/results.json` beside `trajs/`, `logs/`, `all_preds.jsonl` or
    `metadata.yaml` (a patch-only submission has no `trajs/`)."""
    return (path / RESULTS).is_file() and any((path / name).exists() for name in _BESIDE_RESULTS)


def instance_id(path: Path, trajs: Path) -> str:
    """The instance a trajectory file belongs to: its name without the suffixes, or its folder's name."""
    return path.parent.name if path.parent != trajs else _SUFFIX.sub("", path.name)


class _Submission:
    """What a submission folder says besides its trajectories: the verdict lists and the patches."""

    def __init__(self, path: Path, batch: Batch) -> None:
        self.path = path
        self.listed: dict[str, Any] = load_json(path / RESULTS)
        try:
            self.resolved = set(validate(_Results, self.listed, "").resolved)
        except RecordError as error:
            raise IngestError(path / RESULTS, error.json_path, error.reason) from None
        self.no_generation = set(self.lists().get(NO_GENERATION, []))
        self.predictions = _predictions(path, batch)
        self.agent = _agent(path)

    def lists(self) -> dict[str, list[str]]:
        """results.json's lists of instance ids (values that are not lists of ids are left out)."""
        return {
            name: [i for i in ids if isinstance(i, str)] for name, ids in self.listed.items() if isinstance(ids, list)
        }

    def patch(self, instance: str, info: dict[str, Any]) -> tuple[str | None, str]:
        """The instance's submitted patch and the record it came from: all_preds.jsonl (what the
        harness graded), the trajectory's `info.submission` (null: none submitted),
        logs/<id>/patch.diff, or an empty one when results.json lists it under no_generation;
        (None, "") when no record holds it."""
        if instance in self.predictions:
            return self.predictions[instance], "all_preds.jsonl"
        if "submission" in info and isinstance(info["submission"], (str, type(None))):
            return info["submission"] or "", "info.submission"
        diff = self.path / "logs" / instance / "patch.diff"
        if diff.is_file():
            return read_text(diff), f"logs/{instance}/patch.diff"
        if instance in self.no_generation:
            return "", f"results.json {NO_GENERATION}"
        return None, ""


def read_run(path: Path) -> Batch:
    """Every instance of a submission folder that has a trajectory (every listed one when the
    submission has no trajs/ at all); the rest are skipped records."""
    batch = Batch(str(path), FORMAT)
    submission = _Submission(path, batch)
    trajs = path / "trajs"
    if not trajs.is_dir():
        return _verdicts_only(submission, batch)
    seen: set[str] = set()
    for instance, files in _instance_files(trajs).items():
        for file in _trajectory_files(instance, files, batch):
            try:
                trajectory = _read_one(file, instance, submission, batch)
            except IngestError as error:
                batch.skip(error.json_path, error.reason, error.path)
                continue
            if instance in seen:
                batch.skip("", f"a second trajectory for {instance}; the first one read is kept", str(file))
                continue
            seen.add(instance)
            batch.trajectories.append(trajectory)
    for name, ids in submission.lists().items():
        for missing in sorted(set(ids) - seen):
            batch.skip(
                f"{name}",
                f"{missing} is listed in results.json ({name}) but has no trajectory in trajs/",
                str(path / RESULTS),
            )
            seen.add(missing)
    return batch


def _instance_files(trajs: Path) -> dict[str, list[Path]]:
    """The files under trajs/ grouped by instance, in name order (hidden files left out)."""
    grouped: dict[str, list[Path]] = {}
    for file in sorted(p for p in trajs.rglob("*") if p.is_file() and not p.name.startswith(".")):
        grouped.setdefault(instance_id(file, trajs), []).append(file)
    return grouped


def _trajectory_files(instance: str, files: list[Path], batch: Batch) -> list[Path]:
    """The files of one instance to read: its JSON trajectories, of several completion files
    (named after their time) only the latest. Other files beside a trajectory (logs, configs,
    .pred or .patch files) are not records; an instance with no JSON trajectory is skipped with each file."""
    candidates = [f for f in files if f.suffix in _TRAJECTORY_SUFFIXES]
    if not candidates:
        for file in files:
            batch.skip(
                "",
                f"a {file.suffix or 'suffix-less'} trajectory of {instance}: only JSON trajectories are read "
                "(OpenHands completions, mini-swe-agent messages, SWE-agent steps)",
                str(file),
            )
        return []
    completions = [f for f in candidates if completion_time(f.name) is not None]
    if len(completions) > 1:
        latest = latest_completion(completions)
        candidates = [f for f in candidates if f not in completions or f == latest]
    return candidates


def _verdicts_only(submission: _Submission, batch: Batch) -> Batch:
    """A patch-only submission: one record per instance, with its verdict, patch and harness report
    but no messages, after one skipped record saying there are no trajectories."""
    path = submission.path
    logs = path / "logs"
    instances = (
        {i for ids in submission.lists().values() for i in ids}
        | set(submission.predictions)
        | ({d.name for d in logs.iterdir() if d.is_dir()} if logs.is_dir() else set())
    )
    batch.skip(
        "",
        f"no trajectories: a patch-only submission (no trajs/); its {len(instances)} instances are labelled "
        "from their verdict, patch and harness report only",
        str(path / "trajs"),
    )
    source = _source(submission, path / RESULTS, "")
    for instance in sorted(instances):
        try:
            trajectory = _trajectory(submission, instance, source, [], {}, batch)
        except IngestError as error:
            batch.skip(error.json_path, error.reason, error.path)
            continue
        trajectory.metadata["trajectory_format"] = "none"
        batch.trajectories.append(trajectory)
    return batch


def _source(submission: _Submission, file: Path, model: str) -> Source:
    return Source.model_construct(
        benchmark=BENCHMARK, format=FORMAT, file=str(file), agent=submission.agent, model=model
    )


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


def _read_one(file: Path, instance: str, submission: _Submission, batch: Batch) -> Trajectory:
    """One trajectory file as the instance's record (IngestError naming the file and place)."""
    document = load_json(file)
    if not isinstance(document, dict):
        raise IngestError(file, "", "a trajectory file should hold a JSON object")
    try:
        kind, messages, statement = _messages(document)
    except RecordError as error:
        raise IngestError(file, error.json_path, error.reason) from None
    info = document.get("info") if isinstance(document.get("info"), dict) else {}
    trajectory = _trajectory(submission, instance, _source(submission, file, _model(file, info)), messages, info, batch)
    trajectory.metadata["trajectory_format"] = kind
    if statement is not None:
        trajectory.metadata["problem_statement"] = statement
    return trajectory


def _trajectory(
    submission: _Submission,
    instance: str,
    source: Source,
    messages: list[Message],
    info: dict[str, Any],
    batch: Batch,
) -> Trajectory:
    """The instance's record from its messages, verdict, patch and harness report; a resolved
    instance whose patch record is empty is flagged (the verdict kept)."""
    resolved = instance in submission.resolved
    report = _report(submission.path, instance, resolved, batch)
    patch, patch_source = submission.patch(instance, info)
    if resolved and patch == "":
        batch.flag(
            [str(submission.path / RESULTS), f"{instance}: {patch_source}"],
            f"results.json says {instance} is resolved, {patch_source} holds an empty patch; the verdict kept",
        )
    status = info.get("exit_status") if isinstance(info.get("exit_status"), str) else None
    return swe_trajectory(
        submission.path.name, instance, source, messages, resolved, patch, report, status, patch_source
    )


def _model(file: Path, info: dict[str, Any]) -> str:
    """The model: mini-swe-agent's `info.config.model.model_name`, else a completion file's name
    before its time, else ""."""
    config = info.get("config")
    model = config.get("model") if isinstance(config, dict) else None
    if isinstance(model, dict) and isinstance(model.get("model_name"), str):
        return model["model_name"]
    return completion_stem(file.name) if completion_time(file.name) is not None else ""


def _messages(document: dict[str, Any]) -> tuple[str, list[Message], str | None]:
    """(kind, messages, problem statement or None to find it in the messages): mini-swe-agent
    `messages`; an OpenHands completion (or any other `messages` list) through
    `openhands.conversation`; SWE-agent `trajectory` steps after the first user turn of `history`
    (the statement is "" without one)."""
    if str(document.get("trajectory_format", "")).startswith("mini-swe-agent"):
        if not isinstance(document.get("messages"), list):
            raise RecordError("messages", "a mini-swe-agent trajectory needs a `messages` list")
        return "mini-swe-agent", openai_messages(document["messages"], "messages"), None
    if isinstance(document.get("messages"), list) or "fncall_messages" in document:
        kind = "openhands" if any(key in document for key in _COMPLETION_KEYS) else "chat"
        return kind, conversation(document), None
    steps = document.get("trajectory")
    if not isinstance(steps, list):
        keys = ", ".join(list(document)[:6]) or "none"
        raise RecordError(
            "",
            f"not a trajectory this layout reads: no `messages`, `fncall_messages` or `trajectory` list (keys: {keys})",
        )
    history = document.get("history") if isinstance(document.get("history"), list) else []
    asked = [
        openai_content(h.get("content"), "history") for h in history if isinstance(h, dict) and h.get("role") == "user"
    ]
    messages = [Message(role="user", content=asked[0])] if asked else []
    for index, raw in enumerate(steps):
        step = validate(_Step, raw, f"trajectory[{index}]")
        action = f"\n\n```bash\n{step.action.strip()}\n```" if step.action.strip() else ""
        messages.append(Message(role="assistant", content=step.thought.strip() + action))
        messages.append(Message(role="user", content=step.observation))
    return "swe-agent", messages, problem_statement(messages[:1]) if asked else ""


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
