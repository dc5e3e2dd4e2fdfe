"""τ-bench v1 historical trajectories (a JSON list of `{task_id, trial, reward, info{task, reward_info}, traj}`).

`traj` holds OpenAI chat messages whose `tool_calls[].function.arguments` are JSON text. The task
travels inside each record, so the cross-reference checks are: records sharing a task id carry the
same task; the gold actions recorded in `reward_info.actions` are the task's; the record's reward
equals `reward_info.reward`; tool results answer calls that were made.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, FiniteFloat

from tracegym.analysis.ingest.common import Batch, InputFile, RecordError, check_tool_results, openai_messages, validate
from tracegym.schema import Source, Trajectory

FORMAT = "tau_v1"
DOMAINS = ("airline", "retail")
TOOL_ERROR_PREFIX = "Error"  # v1 tools report failures as text starting "Error: ..."


class _Action(BaseModel):
    name: str
    kwargs: dict[str, Any] = {}


class _Task(BaseModel):
    user_id: str | None = None
    instruction: str = ""
    actions: list[_Action] = []
    outputs: list[Any] = []


class _Info(BaseModel):
    task: _Task
    reward_info: dict[str, Any] | None = None


class _Record(BaseModel):
    task_id: int | str
    trial: int = 0
    reward: FiniteFloat | None = None
    info: _Info
    traj: list[Any]


def sniff(file: InputFile) -> bool:
    """A non-empty list whose first item has `traj` and `info`."""
    document = file.document()
    return (
        isinstance(document, list)
        and bool(document)
        and isinstance(document[0], dict)
        and {"traj", "info"} <= document[0].keys()
    )


def _domain(messages: list[Any]) -> str:
    """The domain named by the system prompt (the v1 format records it nowhere else)."""
    system = " ".join(m.content.lower() for m in messages if m.role == "system")
    counts = {domain: system.count(domain) for domain in DOMAINS}
    best = max(counts, key=counts.get)
    return best if counts[best] else "unknown"


def _action_key(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps([name, arguments], sort_keys=True)


def read(file: InputFile) -> Batch:
    """All records of one v1 file; malformed records are listed in `Batch.skipped`."""
    path, document = file.path, file.json()
    if not isinstance(document, list):
        raise RecordError("", f"a τ v1 file is a list of records (got a JSON {type(document).__name__})")
    batch = Batch(str(path), FORMAT)
    first_seen: dict[str, tuple[str, str]] = {}
    for index, raw in enumerate(document):
        where = f"[{index}]"
        try:
            record = validate(_Record, raw, where)
            messages = openai_messages(record.traj, f"{where}.traj")
        except RecordError as error:
            batch.skip(error.json_path, error.reason)
            continue
        for message in messages:
            message.error = message.role == "tool" and message.content.startswith(TOOL_ERROR_PREFIX)
        task = record.info.task
        task_id = str(record.task_id)
        _check_record(batch, where, record, raw["info"]["task"], first_seen)
        check_tool_results(batch, messages, f"{where}.traj")
        domain = _domain(messages)
        reward_info = record.info.reward_info
        batch.trajectories.append(
            Trajectory.model_construct(
                id=f"{path.stem}/{index}",
                task_id=task_id,
                trial=record.trial,
                source=Source.model_construct(
                    benchmark=f"tau-{domain}", format=FORMAT, file=str(path), agent="", model=""
                ),
                messages=messages,
                reward=record.reward,
                success=record.reward is not None and abs(record.reward - 1.0) <= 1e-6,
                termination_reason=None,
                diagnostics={
                    "reward_info": reward_info,
                    "gold_actions": [{"name": a.name, "arguments": a.kwargs} for a in task.actions],
                    "outputs": task.outputs,
                },
                metadata={"domain": domain, "user_instructions": task.instruction, "user_id": task.user_id},
            )
        )
    return batch


def _check_record(
    batch: Batch, where: str, record: _Record, raw_task: Any, first_seen: dict[str, tuple[str, str]]
) -> None:
    task_id = str(record.task_id)
    task_text = json.dumps(raw_task, sort_keys=True)
    if task_id not in first_seen:
        first_seen[task_id] = (where, task_text)
    elif first_seen[task_id][1] != task_text:
        batch.flag([first_seen[task_id][0], where], f"records share task_id {task_id!r} but carry different tasks")
    reward_info = record.info.reward_info or {}
    recorded = reward_info.get("actions")
    if isinstance(recorded, list):
        gold = [_action_key(a.name, a.kwargs) for a in record.info.task.actions if a.name != "respond"]
        got = [
            _action_key(a.get("name", ""), a.get("kwargs") or {})
            for a in recorded
            if isinstance(a, dict) and a.get("name") != "respond"
        ]
        if got != gold:
            batch.flag(
                [f"{where}.info.reward_info.actions", f"{where}.info.task.actions"],
                "reward_info.actions are not the task's gold actions",
            )
    recorded_reward = reward_info.get("reward")
    if (
        isinstance(recorded_reward, (int, float))
        and record.reward is not None
        and abs(recorded_reward - record.reward) > 1e-6
    ):
        batch.flag(
            [f"{where}.reward", f"{where}.info.reward_info.reward"],
            f"reward {record.reward} differs from reward_info.reward {recorded_reward}",
        )
