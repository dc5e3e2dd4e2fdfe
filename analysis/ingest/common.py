"""What the ingest format modules share: errors, the Batch they return, the input file they read
(with JSON decoding that turns hostile input into errors naming the place), and the OpenAI chat
conversion several formats use.

A format module turns one input file (or run folder) into a `Batch`: the trajectories it could
read, the records it had to skip (with the JSON path and why) and the cross-reference
inconsistencies it found. Whether a skipped record aborts the ingest is decided by the caller
(`ingest_paths`), never by the format module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json

from tracegym.analysis.ingest.locate import json_path_at, offset_of
from tracegym.errors import one_line
from tracegym.schema import Message, ToolCall, Trajectory

Model = TypeVar("Model", bound=BaseModel)
ROLES = ("system", "user", "assistant", "tool")
# The deepest nesting pydantic_core's JSON parser accepts (levels of arrays and objects). Every
# input is decoded with it and trajectories.jsonl is read back with it, so no input deeper than
# this can become a record that cannot be read again.
MAX_NESTING = 201
# A tool call's arguments sit this many levels deep in a trajectories.jsonl line.
ARGUMENTS_DEPTH = 5
_SHOWN_PARTS = 12  # of a JSON path in a message
_DEEP = "recursion limit exceeded"
_POSITION = " at line "


class IngestError(Exception):
    """A file or record that cannot be ingested; the message names the file and the JSON path."""

    def __init__(self, path: str | Path, json_path: str, reason: str) -> None:
        self.path = one_line(str(path))
        self.json_path = one_line(json_path)
        self.reason = one_line(reason)
        where = f"{self.path}: {self.json_path}" if self.json_path else self.path
        super().__init__(f"{where}: {self.reason}")


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
        self.skipped.append(SkippedRecord(one_line(path or self.path), one_line(json_path), one_line(reason)))

    def flag(self, records: list[str], message: str, repaired: bool = False) -> None:
        """List records that disagree with each other (`repaired` when the ingest fixed it)."""
        self.inconsistencies.append(
            Inconsistency(self.path, [one_line(r) for r in records], one_line(message), repaired)
        )


def json_path_of(prefix: str, loc: tuple[int | str, ...]) -> str:
    """`prefix` extended with a location: ("messages", 5, "role") -> prefix.messages[5].role; a
    location more than _SHOWN_PARTS deep (hostile nesting) ends in "..." after that many parts."""
    path = prefix
    for part in loc[:_SHOWN_PARTS]:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path + ("..." if len(loc) > _SHOWN_PARTS else "")


def validate(model: type[Model], data: Any, prefix: str) -> Model:
    """`model.model_validate(data)`, turning the first error into a RecordError that names its JSON path."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise _first_error(error, prefix) from None


def validate_json(model: type[Model], text: str, prefix: str) -> Model:
    """`model.model_validate_json(text)`, errors as in `validate` (and as in `decode_json` for the JSON)."""
    try:
        return model.model_validate_json(text)
    except ValidationError as error:
        problem = _first_error(error, prefix)
        if error.errors(include_url=False)[0]["type"] == "json_invalid":
            try:
                decode_json(text)
            except JsonProblem as json_problem:
                problem = json_problem.in_record(prefix)
        raise problem from None


def _first_error(error: ValidationError, prefix: str) -> RecordError:
    first = error.errors(include_url=False)[0]
    return RecordError(json_path_of(prefix, first["loc"]), f"{first['msg']} (got {preview(first.get('input'))})")


def jsonl_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for every non-blank line; lines end at a newline only (a JSON
    string may hold U+2028 and other characters `str.splitlines` would split at)."""
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield number, line


class RecordError(ValueError):
    """One record of a file is malformed; carries the record's JSON path."""

    def __init__(self, json_path: str, reason: str) -> None:
        self.json_path = json_path
        self.reason = reason
        super().__init__(f"{json_path}: {reason}")


def preview(value: Any, limit: int = 60) -> str:
    """A short JSON rendering of `value` for an error message."""
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class JsonProblem(ValueError):
    """Text that is not one acceptable JSON document: what is wrong (`kind`, `message`), where
    (1-based `line` and `column`, the latter in bytes as the parser counts) and `loc`, the keys
    and indices leading to the value being read there (empty at the top level)."""

    def __init__(self, kind: str, message: str, line: int, column: int, loc: tuple[int | str, ...]) -> None:
        self.kind, self.message, self.line, self.column, self.loc = kind, message, line, column, loc
        super().__init__(f"{kind} at line {line} column {column}: {message}")

    def in_file(self, path: Path) -> IngestError:
        """As the error of a whole file."""
        return IngestError(path, json_path_of("", self.loc), str(self))

    def in_record(self, prefix: str) -> RecordError:
        """As the error of a record held in one line or string (a JSONL line, tool-call arguments)."""
        return RecordError(json_path_of(prefix, self.loc), f"{self.kind} at column {self.column}: {self.message}")


def decode_json(text: str) -> Any:
    """One JSON document; raises JsonProblem for invalid or truncated text, nesting deeper than
    MAX_NESTING, integers of more than 4300 digits, lone surrogates, NaN and Infinity."""
    try:
        return from_json(text, allow_inf_nan=False)
    except ValueError as error:
        raise _problem(text, str(error)) from None


def _problem(text: str, error: str) -> JsonProblem:
    if not text.strip():
        return JsonProblem("no JSON", "the text is empty", 1, 1, ())
    message, _, position = error.rpartition(_POSITION)
    line_text, _, column_text = position.partition(" column ")
    if not (message and line_text.isdigit() and column_text.isdigit()):
        return JsonProblem("invalid JSON", error, 0, 0, ())
    line, column = int(line_text), int(column_text)
    if message == _DEEP:
        return JsonProblem(
            "JSON nested too deeply",
            f"more than {MAX_NESTING} levels",
            line,
            column,
            json_path_at(text, max_depth=MAX_NESTING),
        )
    offset = offset_of(text, line, column)
    if text[offset : offset + 1] == "\0":
        message += " (a NUL byte: a binary or zero-filled file?)"
    kind = "truncated JSON" if message.startswith("EOF while parsing") else "invalid JSON"
    return JsonProblem(kind, message, line, column, json_path_at(text, offset=offset))


def nesting(value: Any) -> int:
    """Levels of arrays and objects in a decoded JSON value (0 for a scalar)."""
    if isinstance(value, dict):
        return 1 + max(map(nesting, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(nesting, value), default=0)
    return 0


def read_text(path: Path) -> str:
    """Read a UTF-8 text file, naming it in the error when it cannot be read or decoded."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise IngestError(
            path, "", f"not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start}): a binary file?"
        ) from None
    except OSError as error:
        raise IngestError(path, "", f"cannot read file: {error.strerror or error}") from None


def load_json(path: Path) -> Any:
    """Read and decode a JSON file (errors as IngestError naming the file and the place)."""
    return InputFile(path).json()


_UNREAD = object()


class InputFile:
    """One file being sniffed and read: its text and its JSON value, each read or decoded once, on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._text: str | None = None
        self._value: Any = _UNREAD
        self._problem: JsonProblem | None = None
        self._first: Any = _UNREAD

    @property
    def text(self) -> str:
        """The whole file as text (IngestError when it cannot be read or is not UTF-8)."""
        if self._text is None:
            self._text = read_text(self.path)
        return self._text

    def json(self) -> Any:
        """The file as one JSON document (IngestError naming the place when it is not one)."""
        document = self.document()
        if self._problem is not None:
            raise self._problem.in_file(self.path)
        return document

    def document(self) -> Any:
        """The file's JSON value, or None when the text is not one JSON document (for sniffing)."""
        if self._value is _UNREAD:
            try:
                self._value = decode_json(self.text)
            except JsonProblem as problem:
                self._value, self._problem = None, problem
        return self._value

    def first_line(self) -> Any:
        """The first non-blank line's JSON value, or None when it is not JSON (for sniffing JSONL)."""
        if self._first is _UNREAD:
            line, _, rest = self.text.lstrip().partition("\n")
            if not rest.strip():
                self._first = self.document()
            else:
                try:
                    self._first = decode_json(line)
                except JsonProblem:
                    self._first = None
        return self._first


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


def openai_content(content: Any, where: str) -> str:
    """OpenAI message content (None, a string, or a list of {type: text, text} parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RecordError(where, f"content should be a string, a list of parts or null (got {preview(content)})")
    return "".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))


def openai_messages(raw: list[dict[str, Any]], prefix: str) -> list[Message]:
    """Convert OpenAI chat messages (tool_calls[].function.arguments as JSON text) to schema messages."""
    messages = []
    for index, message in enumerate(raw):
        if not isinstance(message, dict):
            raise RecordError(f"{prefix}[{index}]", f"a message must be an object (got {preview(message)})")
        role = message.get("role")
        if role not in ROLES:
            raise RecordError(
                f"{prefix}[{index}].role", f"role should be one of {', '.join(ROLES)} (got {preview(role)})"
            )
        raw_calls, call_id = message.get("tool_calls") or [], message.get("tool_call_id")
        if not isinstance(raw_calls, list):
            raise RecordError(
                f"{prefix}[{index}].tool_calls", f"tool_calls should be a list (got {preview(raw_calls)})"
            )
        if not (call_id is None or isinstance(call_id, str)):
            raise RecordError(
                f"{prefix}[{index}].tool_call_id", f"tool_call_id should be a string (got {preview(call_id)})"
            )
        calls = [_openai_call(call, prefix, index, n) for n, call in enumerate(raw_calls)]
        messages.append(
            construct(
                Message,
                {
                    "role": role,
                    "content": openai_content(message.get("content"), f"{prefix}[{index}].content"),
                    "tool_calls": calls,
                    "tool_call_id": call_id,
                    "error": False,
                },
            )
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
            arguments = decode_json(arguments) if arguments.strip() else {}
        except JsonProblem as problem:
            raise problem.in_record(f"{where}.function.arguments") from None
    if not isinstance(arguments, dict):
        raise RecordError(f"{where}.function.arguments", "arguments must be a JSON object")
    if nesting(arguments) > MAX_NESTING - ARGUMENTS_DEPTH:
        raise RecordError(
            f"{where}.function.arguments", f"arguments nested deeper than {MAX_NESTING - ARGUMENTS_DEPTH} levels"
        )
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
            batch.flag(
                [where], f"tool result has no call id; set to the only pending call {message.tool_call_id!r}", True
            )
            continue
        batch.flag([where], f"tool result answers call id {message.tool_call_id!r}, which no earlier message made")
