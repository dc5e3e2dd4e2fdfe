"""OpenAI-style chat JSONL: one `{"id"?, "task_id"?, "messages": [...], "reward": float, "success"?,
"diagnostics"?}` object per line. `success` defaults to reward == 1.0. Record paths are
`line N` (1-based) so that a user can open the file at the bad line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tracegym.analysis.ingest.common import Batch, RecordError, check_tool_results, openai_messages, validate
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
    """Two or more lines, the first on its own a JSON object with `messages` (a JSON document is not).
    A one-line file is a JSON document and is sniffed after parsing (see `sniff`)."""
    first, _, rest = text.lstrip().partition("\n")
    if not rest.strip() or not first.startswith("{"):
        return False
    try:
        record = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(record, dict) and "messages" in record


def sniff(document: Any) -> bool:
    """A one-line chat JSONL file: one object with `messages` and `reward`."""
    return isinstance(document, dict) and "messages" in document and "reward" in document


def read(path: Path, document: Any) -> Batch:
    """A one-line chat JSONL file, already parsed."""
    return read_text_lines(path, json.dumps(document))


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
