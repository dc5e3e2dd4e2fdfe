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


def _loads_lenient(raw: str) -> Any:
    """json.loads, then once more after trimming to the outermost braces (models add chatter)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        start, end = raw.find("{"), raw.rfind("}")
        if start == -1 or end <= start:
            raise
        return json.loads(raw[start : end + 1])


def parse_tool_calls(text: str) -> ParsedTurn:
    """Split an assistant turn into prose and tool calls; never raises on malformed input."""
    prose = _CALL_PATTERN.sub("", text).strip()
    turn = ParsedTurn(text=prose)
    for index, match in enumerate(_CALL_PATTERN.finditer(text)):
        raw = match.group(1).strip()
        try:
            payload = _loads_lenient(raw)
        except json.JSONDecodeError as error:
            turn.errors.append(ToolCallError(raw, f"tool call is not valid JSON: {error.msg}"))
            continue
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            turn.errors.append(ToolCallError(raw, 'tool call needs {"name": str, "arguments": object}'))
            continue
        arguments = payload.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        if not isinstance(arguments, dict):
            turn.errors.append(ToolCallError(raw, "tool call arguments must be a JSON object"))
            continue
        turn.calls.append(ToolCall(id=f"call_{index}", name=payload["name"], arguments=arguments))
    return turn


def render_tool_response(content: str) -> str:
    """How a tool result is shown to the policy (inside a user turn)."""
    return f"<tool_response>\n{content}\n</tool_response>"


def tools_system_prompt(instructions: str, tools: list[dict[str, Any]]) -> str:
    """A system prompt stating the task instructions, the tool schemas and the call format."""
    schemas = "\n".join(json.dumps(tool) for tool in tools)
    return (
        f"{instructions.strip()}\n\n"
        "You can call these tools (JSON schemas):\n"
        f"<tools>\n{schemas}\n</tools>\n"
        "To call a tool, reply with exactly one line:\n"
        f'{TOOL_CALL_OPEN}{{"name": <tool name>, "arguments": <JSON object>}}{TOOL_CALL_CLOSE}\n'
        "When you are done, reply with your final answer as plain text, without tool calls."
    )
