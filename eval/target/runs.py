"""Finished episodes of the hotel desk: playing scripted turns, and writing runs as τ²-bench
Results files and tracegym trajectories.

`play_oracle(env, seed)` plays the task's oracle against the scripted user (what warm-starts the
base agent: `EpisodeRecord.chat` is the dialogue as the policy sees it); `play_turns` plays any
scripted assistant turns. `write_runs(env, records, results_path, trajectories_path, ...)` writes
(a) a τ²-bench Results JSON file, `{timestamp, info, tasks[], simulations[]}` with τ² message and
`reward_info` records, and (b) the trajectories `tracegym ingest` reads from that file, as
trajectories.jsonl. (b) is made by reading (a) back with the τ² ingest module, so `tracegym
diagnose` sees the same runs from either; the reader's cross-reference checks must pass on what
was written, or the write fails. Keep the two files apart when a whole folder is diagnosed (ingest
would read both). Each file is replaced atomically.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tracegym.analysis.ingest.common import InputFile
from tracegym.analysis.ingest.tau2 import read as read_tau2
from tracegym.eval.target.environment import EpisodeRecord, TargetEnvironment
from tracegym.eval.target.grading import CONFIRMATION, REWARD_BASIS
from tracegym.eval.target.handbook import DOMAIN, HANDBOOK
from tracegym.eval.target.tasks import Task
from tracegym.eval.target.users import describe
from tracegym.files import write_text_atomic
from tracegym.schema import Message, Trajectory, write_jsonl
from tracegym.synth_envs.base import play


def play_turns(env: TargetEnvironment, seed: int, turns: list[str], trial: int = 0) -> EpisodeRecord:
    """Play scripted assistant `turns` on the task of `seed`; ValueError if they run out before
    the episode ends."""
    chat, result = play(env, seed, turns)
    if not result.ended:
        raise ValueError(f"{env.name}: seed {seed}: the {len(turns)} turns end before the episode does")
    record = env.record(trial)
    record.chat = chat
    return record


def play_oracle(env: TargetEnvironment, seed: int, trial: int = 0) -> EpisodeRecord:
    """The oracle episode of `seed` (reward 1.0)."""
    return play_turns(env, seed, env.oracle(seed), trial)


def tau2_task(task: Task) -> dict[str, Any]:
    """A task as τ²-bench lists it in `tasks[]`."""
    notes = f"split {task.split}, seed {task.seed}, kind {task.kind}: {', '.join(task.capabilities)}"
    return {
        "id": task.id,
        "description": {"purpose": task.scenario["reason_for_call"], "relevant_policies": None, "notes": notes},
        "user_scenario": {"persona": None, "instructions": task.scenario},
        "initial_state": None,
        "evaluation_criteria": {
            "actions": [action.tau2(f"{task.id}_{index}") for index, action in enumerate(task.actions)],
            "env_assertions": None,
            "communicate_info": list(task.communicate),
            "nl_assertions": [CONFIRMATION],
            "reward_basis": list(REWARD_BASIS),
        },
    }


def tau2_message(message: Message, turn: int) -> dict[str, Any]:
    """A transcript message as a τ² message record."""
    if message.role == "tool":
        return {
            "id": message.tool_call_id,
            "role": "tool",
            "content": message.content,
            "requestor": "assistant",
            "error": message.error,
            "turn_idx": turn,
        }
    calls = [
        {"id": c.id, "name": c.name, "arguments": c.arguments, "requestor": "assistant"} for c in message.tool_calls
    ]
    content = (message.content or None) if calls else message.content  # τ²: null beside tool calls
    return {"role": message.role, "content": content, "tool_calls": calls or None, "turn_idx": turn}


def tau2_simulation(record: EpisodeRecord) -> dict[str, Any]:
    """An episode as a τ² simulation record."""
    return {
        "id": f"{record.task.id}-t{record.trial}",
        "task_id": record.task.id,
        "trial": record.trial,
        "seed": record.task.seed,
        "termination_reason": record.termination_reason,
        "messages": [tau2_message(message, turn) for turn, message in enumerate(record.messages)],
        "reward_info": record.reward_info,
    }


def results_document(
    env: TargetEnvironment, records: Sequence[EpisodeRecord], agent: str, model: str, timestamp: str | None = None
) -> dict[str, Any]:
    """The τ²-bench Results document of `records` (one simulation per record, each (task, trial) once)."""
    repeated = [key for key, count in Counter((r.task.id, r.trial) for r in records).items() if count > 1]
    if repeated:
        raise ValueError(f"episode records repeat task and trial {repeated[0]}: give each trial its own number")
    tasks = {r.task.id: r.task for r in records}
    return {
        "timestamp": timestamp or datetime.now(UTC).isoformat(timespec="seconds"),
        "info": {
            "num_trials": 1 + max((r.trial for r in records), default=0),
            "max_steps": env.config.max_turns,
            "agent_info": {"implementation": agent, "llm": model},
            "user_info": describe(env.user),
            "environment_info": {
                "domain_name": DOMAIN,
                "policy": HANDBOOK,
                "tool_defs": [{"type": "function", "function": tool} for tool in env.tools],
            },
        },
        "tasks": [tau2_task(task) for task in sorted(tasks.values(), key=lambda t: t.seed)],
        "simulations": [tau2_simulation(record) for record in records],
    }


def results_name(agent: str, model: str, records: Sequence[EpisodeRecord]) -> str:
    """τ²-bench's file naming: `<model>__<agent>__<N>sims_<T>trial.json` (unsafe characters as _)."""
    trials = 1 + max((r.trial for r in records), default=0)
    safe = [re.sub(r"[^\w.-]+", "_", part) for part in (model, agent)]
    return f"{safe[0]}__{safe[1]}__{len(records)}sims_{trials}trial.json"


def write_runs(
    env: TargetEnvironment,
    records: Sequence[EpisodeRecord],
    results_path: str | Path,
    trajectories_path: str | Path,
    *,
    agent: str = "llm_agent",
    model: str = "",
    timestamp: str | None = None,
) -> list[Trajectory]:
    """Write `records` as a τ² Results file and as trajectories.jsonl (see the module docstring);
    returns the trajectories. `agent` and `model` name the agent implementation and its model."""
    results_path, trajectories_path = Path(results_path), Path(trajectories_path)
    results_path.parent.mkdir(parents=True, exist_ok=True)
    trajectories_path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(results_path, json.dumps(results_document(env, records, agent, model, timestamp)))
    batch = read_tau2(InputFile(results_path))
    problems = [f"{s.json_path}: {s.reason}" for s in batch.skipped] + [i.message for i in batch.inconsistencies]
    if problems:
        raise RuntimeError(f"{results_path}: the τ² reader does not accept what was written: {problems[0]}")
    write_jsonl(batch.trajectories, trajectories_path)
    return batch.trajectories
