"""OpenAI-style chat JSONL: one `{"id"?, "task_id"?, "messages": [...], "reward": float, "success"?,
"diagnostics"?}` object per line. `success` defaults to reward == 1.0. Record paths are
`line N` (1-based) so that a user can open the file at the bad line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tracegym.analysis.ingest_common import Batch, RecordError, check_tool_results, openai_messages, validate
from tracegym.schema import Source, Trajectory

FORMAT = "chat_jsonl"


class _Line(BaseModel):
    id: str | int | None = None
    task_id: str | int | None = None
    trial: int = 0
    messages: list[Any]
    reward: float | None
    success: bool | None = None
    diagnostics: dict[str, Any] = {}
    metadata: dict[str, Any] = {}


def sniff_text(text: str) -> bool:
    """The first non-empty line is on its own a JSON object with `messages` (a JSON document is not)."""
    for line in text.splitlines():
        if line.strip():
            try:
                first = json.loads(line)
            except json.JSONDecodeError:
                return False
            return isinstance(first, dict) and "messages" in first
    return False


def read_text_lines(path: Path, text: str) -> Batch:
    """Every line of a chat JSONL file; malformed lines are listed in `Batch.skipped`."""
    batch = Batch(str(path), FORMAT)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as error:
                raise RecordError(where, f"invalid JSON at column {error.colno}: {error.msg}") from None
            record = validate(_Line, raw, where)
            messages = openai_messages(record.messages, f"{where}.messages")
        except RecordError as error:
            batch.skip(error.json_path, error.reason)
            continue
        check_tool_results(batch, messages, f"{where}.messages")
        identifier = str(record.id) if record.id is not None else str(number)
        success = record.success if record.success is not None else record.reward is not None and abs(record.reward - 1.0) <= 1e-6
        batch.trajectories.append(
            Trajectory.model_construct(
                id=f"{path.stem}/{identifier}", task_id=str(record.task_id if record.task_id is not None else identifier),
                trial=record.trial, source=Source.model_construct(benchmark="chat", format=FORMAT, file=str(path), agent="", model=""),
                messages=messages, reward=record.reward, success=success, termination_reason=None,
                diagnostics=record.diagnostics, metadata=record.metadata,
            )
        )
    return batch
