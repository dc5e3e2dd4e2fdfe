"""Records and helpers shared by the ingest format modules: errors, skipped records, inconsistencies.

A format module turns one parsed file (or run folder) into a `Batch`: the trajectories it could
read, the records it had to skip (with the JSON path and why) and the cross-reference
inconsistencies it found. Whether a skipped record aborts the ingest is decided by the caller
(`ingest_paths`), never by the format module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from tracegym.schema import Message, ToolCall, Trajectory

Model = TypeVar("Model", bound=BaseModel)
ROLES = ("system", "user", "assistant", "tool")


class IngestError(Exception):
    """A file or record that cannot be ingested; the message names the file and the JSON path."""

    def __init__(self, path: str | Path, json_path: str, reason: str) -> None:
        self.path = str(path)
        self.json_path = json_path
        self.reason = reason
        where = f"{self.path}: {json_path}" if json_path else self.path
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class SkippedRecord:
    """A record left out of the dataset: the file, the JSON path of the record ("" = whole file), why."""

    path: str
    json_path: str
    reason: str


@dataclass(frozen=True)
class Inconsistency:
    """Records of one file that disagree with each other; `repaired` says whether ingestion fixed it."""

    path: str
    records: list[str]
    message: str
    repaired: bool = False


@dataclass
class Batch:
    """What one format module read from one source (a file or a run folder)."""

    path: str
    format: str
    trajectories: list[Trajectory] = field(default_factory=list)
    skipped: list[SkippedRecord] = field(default_factory=list)
    inconsistencies: list[Inconsistency] = field(default_factory=list)

    def skip(self, json_path: str, reason: str, path: str | None = None) -> None:
        """List a record as skipped; `path` names the file when it is not the batch's own."""
        self.skipped.append(SkippedRecord(path or self.path, json_path, reason))

    def flag(self, records: list[str], message: str, repaired: bool = False) -> None:
        self.inconsistencies.append(Inconsistency(self.path, records, message, repaired))


def json_path_of(prefix: str, loc: tuple[int | str, ...]) -> str:
    """`prefix` extended with a pydantic error location: ("messages", 5, "role") -> prefix.messages[5].role."""
    path = prefix
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def validate(model: type[BaseModel], data: Any, prefix: str) -> BaseModel:
    """`model.model_validate(data)`, turning the first error into a ValueError that names its JSON path."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        raise RecordError(json_path_of(prefix, first["loc"]), f"{first['msg']} (got {_preview(first.get('input'))})") from None


class RecordError(ValueError):
    """One record of a file is malformed; carries the record's JSON path."""

    def __init__(self, json_path: str, reason: str) -> None:
        self.json_path = json_path
        self.reason = reason
        super().__init__(f"{json_path}: {reason}")


def _preview(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_json(path: Path) -> Any:
    """Parse a JSON file; a truncated or invalid file raises IngestError with the line and column."""
    return parse_json(path, read_text(path))


def parse_json(path: Path, text: str) -> Any:
    """Parse the text of `path` as one JSON document (errors as in `load_json`)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        truncated = error.pos >= len(text.rstrip()) - 1
        kind = "truncated JSON" if truncated else "invalid JSON"
        raise IngestError(path, f"line {error.lineno} column {error.colno}", f"{kind}: {error.msg}") from None


def read_text(path: Path) -> str:
    """Read a UTF-8 text file, naming it in the error when it cannot be read or decoded."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise IngestError(path, "", f"cannot read file: {error}") from None


def construct(model: type[Model], values: dict[str, Any]) -> Model:
    """A model instance from already-checked values, without validation: every field must be given.

    The same as `model.model_construct` minus its per-field default handling, which dominates
    ingest time on large files (tens of thousands of messages).
    """
    instance = object.__new__(model)
    object.__setattr__(instance, "__dict__", values)
    object.__setattr__(instance, "__pydantic_fields_set__", set(values))
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance


def openai_content(content: Any) -> str:
    """OpenAI message content (None, a string, or a list of {type: text, text} parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def openai_messages(raw: list[dict[str, Any]], prefix: str) -> list[Message]:
    """Convert OpenAI chat messages (tool_calls[].function.arguments as JSON text) to schema messages."""
    messages = []
    for index, message in enumerate(raw):
        if not isinstance(message, dict):
            raise RecordError(f"{prefix}[{index}]", f"a message must be an object (got {_preview(message)})")
        role = message.get("role")
        if role not in ROLES:
            raise RecordError(f"{prefix}[{index}].role", f"role should be one of {', '.join(ROLES)} (got {_preview(role)})")
        calls = [_openai_call(call, prefix, index, n) for n, call in enumerate(message.get("tool_calls") or ())]
        messages.append(
            construct(Message, {
                "role": role, "content": openai_content(message.get("content")), "tool_calls": calls,
                "tool_call_id": message.get("tool_call_id"), "error": False,
            })
        )
    return messages


def _openai_call(call: Any, prefix: str, index: int, call_index: int) -> ToolCall:
    where = f"{prefix}[{index}].tool_calls[{call_index}]"
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RecordError(where, "a tool call needs {function: {name, arguments}}")
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            raise RecordError(f"{where}.function.arguments", f"arguments are not valid JSON: {error.msg}") from None
    if not isinstance(arguments, dict):
        raise RecordError(f"{where}.function.arguments", "arguments must be a JSON object")
    return construct(ToolCall, {"id": str(call.get("id") or ""), "name": function["name"], "arguments": arguments})


def check_tool_results(batch: Batch, messages: list[Message], prefix: str) -> None:
    """Flag tool results that answer no call made before them; repair an id-less result when exactly
    one call is pending (the only unambiguous case)."""
    pending: list[str] = []
    made: set[str] = set()
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            pending.append(call.id)
            made.add(call.id)
        if message.role != "tool":
            continue
        where = f"{prefix}[{index}]"
        if message.tool_call_id in made:
            if message.tool_call_id in pending:
                pending.remove(message.tool_call_id)
            continue
        if not message.tool_call_id and len(pending) == 1:
            message.tool_call_id = pending.pop()
            batch.flag([where], f"tool result has no call id; set to the only pending call {message.tool_call_id!r}", True)
            continue
        batch.flag([where], f"tool result answers call id {message.tool_call_id!r}, which no earlier message made")
