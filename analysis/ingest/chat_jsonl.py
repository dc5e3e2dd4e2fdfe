"""OpenAI-style chat JSONL: one `{"id"?, "task_id"?, "messages": [...], "reward": float, "success"?,
"diagnostics"?}` object per line. `success` defaults to reward == 1.0. Record paths are
`line N` (1-based) so that a user can open the file at the bad line. A file holding one JSON
document (one record, possibly over several lines) is that one record, `line 1`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, FiniteFloat

from tracegym.analysis.ingest.common import (
    Batch,
    InputFile,
    JsonProblem,
    RecordError,
    check_tool_results,
    decode_json,
    jsonl_lines,
    openai_messages,
    validate,
)
from tracegym.schema import Source, Trajectory

FORMAT = "chat_jsonl"


class _Line(BaseModel):
    id: str | int | None = None
    task_id: str | int | None = None
    trial: int = 0
    messages: list[Any]
    reward: FiniteFloat | None
    success: bool | None = None
    diagnostics: dict[str, Any] = {}
    metadata: dict[str, Any] = {}


def sniff(file: InputFile) -> bool:
    """One JSON object with `messages` and `reward`, or lines whose first is an object with `messages`."""
    document = file.document()
    if document is not None:
        return isinstance(document, dict) and "messages" in document and "reward" in document
    first = file.first_line()
    return isinstance(first, dict) and "messages" in first


def read(file: InputFile) -> Batch:
    """Every record of a chat JSONL file; malformed lines are listed in `Batch.skipped`."""
    path = file.path
    batch = Batch(str(path), FORMAT)
    for number, raw in _records(file):
        where = f"line {number}"
        try:
            if isinstance(raw, JsonProblem):
                raise raw.in_record(where)
            record = validate(_Line, raw, where)
            messages = openai_messages(record.messages, f"{where}.messages")
        except RecordError as error:
            batch.skip(error.json_path, error.reason)
            continue
        check_tool_results(batch, messages, f"{where}.messages")
        identifier = str(record.id) if record.id is not None else str(number)
        success = (
            record.success
            if record.success is not None
            else record.reward is not None and abs(record.reward - 1.0) <= 1e-6
        )
        batch.trajectories.append(
            Trajectory.model_construct(
                id=f"{path.stem}/{identifier}",
                task_id=str(record.task_id if record.task_id is not None else identifier),
                trial=record.trial,
                source=Source.model_construct(benchmark="chat", format=FORMAT, file=str(path), agent="", model=""),
                messages=messages,
                reward=record.reward,
                success=success,
                termination_reason=None,
                diagnostics=record.diagnostics,
                metadata=record.metadata,
            )
        )
    return batch


def _records(file: InputFile) -> Iterator[tuple[int, Any]]:
    """(line number, decoded record or the JsonProblem of its line)."""
    document = file.document()
    if document is not None:
        yield 1, document
        return
    for number, line in jsonl_lines(file.text):
        try:
            yield number, decode_json(line)
        except JsonProblem as problem:
            yield number, problem
