"""The one text format tracegym's policies use for tool calls, and its tolerant parser.

A call is Hermes-style JSON inside tags:

    <tool_call>{"name": "get_user", "arguments": {"user_id": "u_17"}}</tool_call>

An assistant turn may hold several calls; text outside the tags is free prose. A turn with no
`<tool_call>` tag is a final answer. A malformed call never raises: `parse_tool_calls` returns it
as a `ToolCallError`, which the environment turns into an error observation and counts.
Tool results go back to the model as `<tool_response>...</tool_response>` in a user turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from tracegym.schema import ToolCall

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_CALL_PATTERN = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


@dataclass(frozen=True)
class ToolCallError:
    """A call the parser could not read: the raw text and why."""

    raw: str
    reason: str


@dataclass
class ParsedTurn:
    """An assistant turn split into its prose, its well-formed calls and its malformed ones."""

    text: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[ToolCallError] = field(default_factory=list)

    @property
    def is_final_answer(self) -> bool:
        return not self.calls and not self.errors


def render_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The canonical text of one call."""
    return f"{TOOL_CALL_OPEN}{json.dumps({'name': name, 'arguments': arguments})}{TOOL_CALL_CLOSE}"


def to_json(value: Any) -> str:
    """Compact JSON text of a tool result (orjson: several times faster than `json.dumps`, and
    results are serialised on every step of every episode). Non-string keys become strings."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def _loads_lenient(raw: str) -> Any:
    """Parse JSON, then once more after trimming to the outermost braces (models add chatter).

    orjson's decode error is a `json.JSONDecodeError`, so callers need not know the parser.
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        start, end = raw.find("{"), raw.rfind("}")
        if start == -1 or end <= start:
            raise
        return orjson.loads(raw[start : end + 1])


def parse_tool_calls(text: str) -> ParsedTurn:
    """Split an assistant turn into prose and tool calls; never raises on malformed input."""
    if TOOL_CALL_OPEN not in text:
        return ParsedTurn(text=text.strip())
    prose, calls, errors, end = [], [], [], 0
    for index, match in enumerate(_CALL_PATTERN.finditer(text)):
        prose.append(text[end : match.start()])
        end = match.end()
        call = _read_call(match.group(1).strip(), index)
        (errors if isinstance(call, ToolCallError) else calls).append(call)
    prose.append(text[end:])
    return ParsedTurn("".join(prose).strip(), calls, errors)


def _read_call(raw: str, index: int) -> ToolCall | ToolCallError:
    """The call written as `raw` (the text between the tags), or why it cannot be read."""
    try:
        payload = _loads_lenient(raw)
    except json.JSONDecodeError as error:
        return ToolCallError(raw, f"tool call is not valid JSON: {error.msg}")
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return ToolCallError(raw, 'tool call needs {"name": str, "arguments": object}')
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            pass
    if not isinstance(arguments, dict):
        return ToolCallError(raw, "tool call arguments must be a JSON object")
    return ToolCall(id=f"call_{index}", name=payload["name"], arguments=arguments)


def render_tool_response(content: str) -> str:
    """How a tool result is shown to the policy (inside a user turn)."""
    return f"<tool_response>\n{content}\n</tool_response>"


FINAL_ANSWER = "When you are done, reply with your final answer as plain text, without tool calls."


def tool_signature(schema: dict[str, Any]) -> str:
    """One line for a tool's JSON schema (OpenAI function format): `name(arg: type, opt?: type) -
    description`; an enum shows its values (`room_type: standard|deluxe|suite`). Parameter
    descriptions are left out: the compact rendering of `tools_system_prompt`."""
    parameters = schema.get("parameters", {})
    required = set(parameters.get("required", []))
    args = []
    for name, spec in parameters.get("properties", {}).items():
        kind = "|".join(str(value) for value in spec["enum"]) if "enum" in spec else spec.get("type", "any")
        args.append(f"{name}{'' if name in required else '?'}: {kind}")
    return f"{schema['name']}({', '.join(args)}) - {schema.get('description', '')}".rstrip(" -")


def tools_system_prompt(
    instructions: str, tools: list[dict[str, Any]], closing: str = FINAL_ANSWER, compact: bool = False
) -> str:
    """A system prompt stating the task instructions, the tools and the call format, ending with
    `closing` (what a plain-text turn means; default: the final answer). The tools are their JSON
    schemas, or with `compact` one `tool_signature` line each (the target desk's 11 tools: 425 vs
    1,214 tokens)."""
    if compact:
        listing = (
            "You can call these tools (name(arguments) - what it does; ? marks an optional argument):\n"
            + "\n".join(tool_signature(tool) for tool in tools)
        )
    else:
        listing = (
            "You can call these tools (JSON schemas):\n<tools>\n"
            + "\n".join(json.dumps(tool) for tool in tools)
            + "\n</tools>"
        )
    return (
        f"{instructions.strip()}\n\n{listing}\n"
        "To call a tool, reply with exactly one line:\n"
        f'{TOOL_CALL_OPEN}{{"name": <tool name>, "arguments": <JSON object>}}{TOOL_CALL_CLOSE}\n'
    ) + closing
