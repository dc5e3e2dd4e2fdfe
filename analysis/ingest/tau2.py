"""τ²-bench Results JSON (`{timestamp, info, tasks[], simulations[]}`) -> trajectories.

Each simulation is validated once against a small input model (unknown fields ignored) and turned
into a Trajectory without a second validation. Cross-reference checks: the simulation's task exists
in `tasks[]`, and the verdict details recorded in `reward_info` (gold actions in `action_checks`,
`nl_assertions`, `communicate_checks`, `env_assertions`) are that task's. When they are not, and
exactly one task of the file matches them all, the simulation was mislabelled: its task id is
repaired and the repair reported; otherwise the mismatch is reported and the label kept.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, FiniteFloat, InstanceOf

from tracegym.analysis.ingest.common import (
    ROLES,
    Batch,
    InputFile,
    RecordError,
    check_tool_results,
    construct,
    preview,
    validate,
)
from tracegym.schema import Message, Source, ToolCall, Trajectory

FORMAT = "tau2_results"
SUCCESS_TOLERANCE = 1e-6


class _Agent(BaseModel):
    implementation: str = ""
    llm: str = ""


class _User(BaseModel):
    llm: str = ""


class _Environment(BaseModel):
    domain_name: str
    policy: str = ""


class _Info(BaseModel):
    agent_info: _Agent
    user_info: _User = _User()
    environment_info: _Environment


class _Results(BaseModel):
    timestamp: str | None = None
    info: _Info
    tasks: list[dict[str, Any]]
    simulations: list[Any]


class _Criteria(BaseModel):
    actions: list[dict[str, Any]] | None = None
    env_assertions: list[dict[str, Any]] | None = None
    communicate_info: list[str] | None = None
    nl_assertions: list[str] | None = None


class _Task(BaseModel):
    id: str | int
    description: Any = None
    user_scenario: dict[str, Any] | None = None
    evaluation_criteria: _Criteria | None = None


class _Action(BaseModel):
    action_id: str | None = None
    name: str
    arguments: InstanceOf[dict] = {}


class _ActionCheck(BaseModel):
    action: _Action


class _NlCheck(BaseModel):
    nl_assertion: str


class _CommunicateCheck(BaseModel):
    info: str


class _EnvCheck(BaseModel):
    env_assertion: InstanceOf[dict]


class _RewardInfo(BaseModel):
    reward: FiniteFloat | None = None
    action_checks: list[_ActionCheck] | None = None
    nl_assertions: list[_NlCheck] | None = None
    communicate_checks: list[_CommunicateCheck] | None = None
    env_assertions: list[_EnvCheck] | None = None


class _Simulation(BaseModel):
    id: str
    task_id: str | int
    trial: int = 0
    termination_reason: str | None = None
    messages: list[Any]
    reward_info: _RewardInfo | None = None


def sniff(file: InputFile) -> bool:
    """A τ² Results file is an object with `simulations` and `tasks`."""
    document = file.document()
    return isinstance(document, dict) and "simulations" in document and "tasks" in document


def _text_key(text: str) -> str:
    """Compare assertion texts up to case, spacing and punctuation (task sets fix typos in them)."""
    return " ".join(re.findall(r"[a-z0-9$]+", text.lower()))


def _action_key(action_id: str | None, name: str, arguments: dict[str, Any]) -> tuple[str, str, str]:
    return (action_id or "", name, json.dumps(arguments, sort_keys=True))


def _task_verdict(task: _Task) -> dict[str, list]:
    criteria = task.evaluation_criteria or _Criteria()
    return {
        "gold actions": [
            _action_key(a.get("action_id"), a.get("name", ""), a.get("arguments") or {}) for a in criteria.actions or []
        ],
        "nl_assertions": [_text_key(text) for text in criteria.nl_assertions or []],
        "communicate_info": [_text_key(text) for text in criteria.communicate_info or []],
        "env_assertions": [json.dumps(e, sort_keys=True) for e in criteria.env_assertions or []],
    }


def _recorded_verdict(info: _RewardInfo) -> dict[str, list]:
    """The parts of the verdict that were recorded (None = not graded, so not compared)."""
    recorded: dict[str, list] = {}
    if info.action_checks is not None:
        recorded["gold actions"] = [
            _action_key(c.action.action_id, c.action.name, c.action.arguments) for c in info.action_checks
        ]
    if info.nl_assertions is not None:
        recorded["nl_assertions"] = [_text_key(c.nl_assertion) for c in info.nl_assertions]
    if info.communicate_checks is not None:
        recorded["communicate_info"] = [_text_key(c.info) for c in info.communicate_checks]
    if info.env_assertions is not None:
        recorded["env_assertions"] = [json.dumps(c.env_assertion, sort_keys=True) for c in info.env_assertions]
    return recorded


def _disagreements(recorded: dict[str, list], verdict: dict[str, list]) -> list[str]:
    return [part for part, values in recorded.items() if values != verdict[part]]


def read(file: InputFile) -> Batch:
    """All simulations of one Results file; malformed records are listed in `Batch.skipped`."""
    path = file.path
    batch = Batch(str(path), FORMAT)
    results = validate(_Results, file.json(), "")
    tasks: dict[str, _Task] = {}
    raw_tasks: dict[str, dict[str, Any]] = {}
    task_paths: dict[str, str] = {}
    for index, raw in enumerate(results.tasks):
        try:
            task = validate(_Task, raw, f"tasks[{index}]")
        except RecordError as error:
            batch.skip(error.json_path, error.reason)
            continue
        tasks[str(task.id)] = task
        raw_tasks[str(task.id)] = raw
        task_paths[str(task.id)] = f"tasks[{index}]"
    verdicts = {task_id: _task_verdict(task) for task_id, task in tasks.items()}
    info = results.info
    source = Source.model_construct(
        benchmark=f"tau2-{info.environment_info.domain_name}",
        format=FORMAT,
        file=str(path),
        agent=info.agent_info.implementation,
        model=info.agent_info.llm,
    )
    shared_metadata = {
        "domain": info.environment_info.domain_name,
        "policy": info.environment_info.policy,
        "agent_llm": info.agent_info.llm,
        "user_llm": info.user_info.llm,
        "timestamp": results.timestamp,
    }
    for index, raw in enumerate(results.simulations):
        where = f"simulations[{index}]"
        try:
            simulation = validate(_Simulation, raw, where)
            messages = _messages(simulation.messages, where)
        except RecordError as error:
            batch.skip(error.json_path, error.reason)
            continue
        task_id = _checked_task_id(batch, simulation, where, tasks, verdicts, task_paths)
        trajectory = _trajectory(
            path, simulation, messages, raw.get("reward_info"), task_id, raw_tasks.get(task_id), source, shared_metadata
        )
        check_tool_results(batch, trajectory.messages, f"{where}.messages")
        batch.trajectories.append(trajectory)
    return batch


def _checked_task_id(
    batch: Batch,
    simulation: _Simulation,
    where: str,
    tasks: dict[str, _Task],
    verdicts: dict[str, dict[str, list]],
    task_paths: dict[str, str],
) -> str:
    """The simulation's task id after the cross-reference checks (repaired only when unambiguous)."""
    label = str(simulation.task_id)
    recorded = _recorded_verdict(simulation.reward_info) if simulation.reward_info else {}
    if label in tasks:
        differing = _disagreements(recorded, verdicts[label])
        if not differing:
            return label
        problem = f"reward_info {', '.join(differing)} are not those of task {label!r}"
    else:
        problem = f"task {label!r} is not in tasks[]"
    matches = [task_id for task_id, verdict in verdicts.items() if recorded and not _disagreements(recorded, verdict)]
    records = [where] + ([task_paths[label]] if label in task_paths else [])
    if len(matches) == 1:
        batch.flag(
            records + [task_paths[matches[0]]],
            f"{problem}; they match task {matches[0]!r} only: task_id set to {matches[0]!r}",
            True,
        )
        return matches[0]
    candidates = f"{len(matches)} tasks match them" if matches else "no task matches them"
    batch.flag(records, f"{problem}; {candidates}, label kept")
    return label


def _messages(raw_messages: list[Any], where: str) -> list[Message]:
    """τ² messages as schema messages, checked by hand (the hot loop: no per-message pydantic model)."""
    messages = []
    for index, raw in enumerate(raw_messages):
        if raw.__class__ is not dict:
            raise _message_error(raw, f"{where}.messages[{index}]")
        role, content, error, raw_calls = (
            raw.get("role"),
            raw.get("content"),
            raw.get("error", False),
            raw.get("tool_calls") or [],
        )
        call_id = raw.get("id") if role == "tool" else None
        if (
            role not in ROLES
            or not (content is None or content.__class__ is str)
            or error.__class__ is not bool
            or raw_calls.__class__ is not list
            or not (call_id is None or call_id.__class__ is str)
        ):
            raise _message_error(raw, f"{where}.messages[{index}]")
        calls = []
        for call in raw_calls:
            arguments = call.get("arguments", {}) if call.__class__ is dict else None
            if arguments.__class__ is not dict or call.get("name").__class__ is not str:
                raise _message_error(raw, f"{where}.messages[{index}]")
            calls.append(
                construct(ToolCall, {"id": str(call.get("id") or ""), "name": call["name"], "arguments": arguments})
            )
        messages.append(
            construct(
                Message,
                {"role": role, "content": content or "", "tool_calls": calls, "tool_call_id": call_id, "error": error},
            )
        )
    return messages


def _message_error(raw: Any, at: str) -> RecordError:
    """What is wrong with a message the fast path rejected, at its precise JSON path."""
    if not isinstance(raw, dict):
        return RecordError(at, f"a message should be an object (got {type(raw).__name__})")
    if raw.get("role") not in ROLES:
        return RecordError(f"{at}.role", f"role should be one of {', '.join(ROLES)} (got {preview(raw.get('role'))})")
    if not isinstance(raw.get("content"), (str, type(None))):
        return RecordError(f"{at}.content", f"content should be a string or null (got {type(raw['content']).__name__})")
    if not isinstance(raw.get("error", False), bool):
        return RecordError(f"{at}.error", f"error should be true or false (got {preview(raw['error'])})")
    if not isinstance(raw.get("tool_calls") or [], list):
        return RecordError(f"{at}.tool_calls", f"tool_calls should be a list (got {preview(raw['tool_calls'])})")
    if raw["role"] == "tool" and not isinstance(raw.get("id"), (str, type(None))):
        return RecordError(f"{at}.id", f"a tool result's id should be a string (got {preview(raw['id'])})")
    calls = raw.get("tool_calls") or []
    bad = next(
        (
            i
            for i, c in enumerate(calls)
            if not (isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("arguments", {}), dict))
        ),
        0,
    )
    return RecordError(f"{at}.tool_calls[{bad}]", "a tool call should be {id, name: string, arguments: object}")


def _trajectory(
    path: Path,
    simulation: _Simulation,
    messages: list[Message],
    raw_reward_info: Any,
    task_id: str,
    raw_task: dict[str, Any] | None,
    source: Source,
    shared_metadata: dict[str, Any],
) -> Trajectory:
    reward = simulation.reward_info.reward if simulation.reward_info else None
    task = raw_task or {}
    criteria = task.get("evaluation_criteria") or {}
    return Trajectory.model_construct(
        id=f"{path.stem}/{simulation.id}",
        task_id=task_id,
        trial=simulation.trial,
        source=source,
        messages=messages,
        reward=reward,
        success=reward is not None and abs(reward - 1.0) <= SUCCESS_TOLERANCE,
        termination_reason=simulation.termination_reason,
        diagnostics={
            "reward_info": raw_reward_info,
            "gold_actions": criteria.get("actions") or [],
            "communicate_info": criteria.get("communicate_info") or [],
            "nl_assertions": criteria.get("nl_assertions") or [],
        },
        metadata={
            **shared_metadata,
            "user_instructions": (task.get("user_scenario") or {}).get("instructions"),
            "task_description": task.get("description"),
        },
    )
