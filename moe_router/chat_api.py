"""OpenAI chat-completions wire format: request validation, prompt building, reply conversion.

Requests are validated with pydantic (unknown fields ignored, as OpenAI clients send extras;
unsupported values refused with a message). Tools are rendered into the system prompt with
`tracegym.toolcalls.tools_system_prompt` (the first system message's text is the instructions);
each tool's `function` object is rendered exactly as received, so a client that sends an
environment's instructions and tools gets the environment's own system prompt. Past assistant
tool calls are rendered in the project's Hermes format, tool results as `<tool_response>` user
turns (`tracegym.generation.render_chat`).

Replies: the model's text is parsed with `tracegym.toolcalls.parse_tool_calls`. When it holds
well-formed calls and nothing malformed, they come back as OpenAI `tool_calls` (arguments as a
JSON string) with the prose outside the tags as `content` (stripped; None when empty) and
finish_reason "tool_calls". Otherwise the raw text is the `content`, so a client sees exactly what
the model wrote (a malformed call included).

`tool_choice`: "auto" (default) and "none" (tools left out of the prompt) as OpenAI; "required"
and a named function (`{"type": "function", "function": {"name": ...}}`) constrain the reply's
opening to `<tool_call>{"name": "<one of the tools, or the named one>", "arguments":` and, when
the finished reply is still not a well-formed call of an allowed tool (arguments that are not a
JSON object, a reply cut at max_tokens), the server answers an error instead of a reply (when
streaming, an error event after the chunks already sent).
`response_format`: {"type": "text"} is accepted; JSON formats are refused with 400 (no
JSON-constrained decoding here).

Log-probabilities as vLLM's OpenAI server returns them: `logprobs: true` (and `top_logprobs`, 0 to
20) gives `choices[0].logprobs.content`, one `{token, logprob, bytes, top_logprobs}` per generated
token (the end-of-turn token included); each `top_logprobs` lists the sampled token first, then
the most likely others, `top_logprobs` entries in all. vLLM's extra field
`return_tokens_as_token_ids: true` writes every `token` as "token_id:<id>"
(`tracegym.moe_router.logprobs`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tracegym.schema import Message, ToolCall
from tracegym.toolcalls import parse_tool_calls, tools_system_prompt

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

TOOL_CALL_TAG = "<tool_call>"


class RequestError(ValueError):
    """A request the server refuses: `status` (4xx) and a message for the client."""

    def __init__(self, status: int, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class FunctionCall(BaseModel):
    name: str
    arguments: str


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class Tool(BaseModel):
    type: Literal["function"]
    function: dict[str, Any]

    @field_validator("function")
    @classmethod
    def _named(cls, function: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError("a tool's function needs a non-empty string 'name'")
        return function


class FunctionName(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    """`tool_choice` naming the function the reply must call."""

    type: Literal["function"]
    function: FunctionName


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema"]


MAX_TOP_LOGPROBS = 20


class ChatRequest(BaseModel):
    """The fields of an OpenAI chat-completions request this server reads (with vLLM's
    `return_tokens_as_token_ids`). Defaults: temperature 1, top_p 1, max_tokens the server's
    default (capped by the context window), no log-probabilities. `check_request` checks what
    the fields' types cannot."""

    model_config = ConfigDict(extra="ignore")
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    return_tokens_as_token_ids: bool | None = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=1)

    @field_validator("stop")
    @classmethod
    def _stops(cls, stop: str | list[str] | None) -> str | list[str] | None:
        stops = [stop] if isinstance(stop, str) else stop or []
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop takes at most 4 non-empty strings")
        return stop

    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    def requested_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def required_tools(self) -> list[str] | None:
        """The functions the reply must call one of (`tool_choice` "required" or named), else None."""
        if isinstance(self.tool_choice, NamedToolChoice):
            return [self.tool_choice.function.name]
        if self.tool_choice == "required":
            return [tool.function["name"] for tool in self.tools or []]
        return None

    def top_count(self) -> int | None:
        """How many top tokens to report per generated token (None: no log-probabilities)."""
        return (self.top_logprobs or 0) if self.logprobs else None


def check_request(request: ChatRequest) -> None:
    """Raise RequestError (400) for a request the fields' types allow but this server cannot
    honour: a required or named tool without tools, an unknown named tool, a JSON response
    format, `top_logprobs` without `logprobs`."""
    choice = request.tool_choice
    if isinstance(choice, NamedToolChoice) or choice == "required":
        shown = f"function '{choice.function.name}'" if isinstance(choice, NamedToolChoice) else "'required'"
        if not request.tools:
            raise RequestError(400, f"tool_choice {shown} needs tools", "invalid_tool_choice")
        names = [tool.function["name"] for tool in request.tools]
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise RequestError(
                400, f"tool_choice names function '{choice.function.name}', not among the tools: {', '.join(names)}"
            )
    if request.response_format is not None and request.response_format.type != "text":
        raise RequestError(
            400,
            f"response_format type '{request.response_format.type}' is not supported: this server has no "
            "JSON-constrained decoding; send {'type': 'text'} or leave response_format out",
            "unsupported_response_format",
        )
    if request.top_logprobs is not None and not request.logprobs:
        raise RequestError(400, "when using `top_logprobs`, `logprobs` must be set to true", "invalid_logprobs")


def call_openings(names: Sequence[str], tokenizer: PreTrainedTokenizerBase) -> tuple[tuple[int, ...], ...]:
    """Token sequences of `<tool_call>{"name": "NAME", "arguments":` for each function name: the
    openings a reply that must call one of `names` is held to. They stop before the space, which
    the tokenizer joins to the next token (` {"`), so the model goes on as it learned to."""
    texts = [f'{TOOL_CALL_TAG}{json.dumps({"name": name})[:-1]}, "arguments":' for name in names]
    return tuple(tuple(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts)


def tool_choice_problem(text: str, allowed: Sequence[str]) -> str | None:
    """Why the reply `text` is not what a required tool choice asks for: well-formed calls of
    the `allowed` functions only (None when it is)."""
    turn = parse_tool_calls(text)
    if turn.errors:
        return f"the reply's tool call is malformed: {turn.errors[0].reason}"
    if not turn.calls:
        return "the reply holds no tool call"
    wrong = [call.name for call in turn.calls if call.name not in allowed]
    if wrong:
        return f"the reply calls '{wrong[0]}', not one of {', '.join(allowed)}"
    return None


def to_messages(request: ChatRequest) -> list[Message]:
    """The conversation as tracegym messages, tools rendered into the system prompt."""
    messages = []
    for index, message in enumerate(request.messages):
        if message.role in ("system", "developer"):
            messages.append(Message(role="system", content=message.text()))
        elif message.role == "assistant":
            calls = [
                ToolCall(id=call.id, name=call.function.name, arguments=_arguments(call, index))
                for call in message.tool_calls or []
            ]
            messages.append(Message(role="assistant", content=message.text(), tool_calls=calls))
        else:
            messages.append(Message(role=message.role, content=message.text(), tool_call_id=message.tool_call_id))
    if request.tools and request.tool_choice != "none":
        if messages[0].role == "system":
            instructions = messages.pop(0).content
        else:
            instructions = ""
        prompt = tools_system_prompt(instructions, [tool.function for tool in request.tools]).lstrip()
        messages.insert(0, Message(role="system", content=prompt))
    return messages


def _arguments(call: ToolCallIn, index: int) -> dict[str, Any]:
    try:
        arguments = json.loads(call.function.arguments) if call.function.arguments.strip() else {}
    except json.JSONDecodeError as error:
        raise RequestError(
            400, f"messages[{index}].tool_calls: arguments of '{call.function.name}' are not JSON: {error.msg}"
        ) from None
    if not isinstance(arguments, dict):
        raise RequestError(
            400, f"messages[{index}].tool_calls: arguments of '{call.function.name}' must be a JSON object"
        )
    return arguments


def cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    """`text` up to the first stop string (OpenAI replies leave the stop string out)."""
    ends = [text.find(stop) for stop in stops if stop in text]
    return text[: min(ends)] if ends else text


def reply_message(text: str) -> tuple[dict[str, Any], bool]:
    """The assistant message for the model's `text`, and whether it carries tool calls."""
    turn = parse_tool_calls(text)
    if not turn.calls or turn.errors:
        return {"role": "assistant", "content": text}, False
    calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for call in turn.calls
    ]
    return {"role": "assistant", "content": turn.text or None, "tool_calls": calls}, True


def completion(
    model: str,
    text: str,
    finish: str,
    prompt_tokens: int,
    completion_tokens: int,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A `chat.completion` object; `finish` is "stop" or "length" (tool calls make it "tool_calls");
    `logprobs`: the `logprobs.content` entries (None: not asked for)."""
    message, has_calls = reply_message(text)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None if logprobs is None else {"content": logprobs},
                "finish_reason": "tool_calls" if has_calls and finish == "stop" else finish,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class StreamWriter:
    """Turns a growing reply text into `chat.completion.chunk` payloads.

    Content is streamed as it is decoded, except what could still become a tool-call tag or a
    stop string, trailing whitespace and an incomplete character, which wait for the next text;
    nothing from the first tag on is streamed as content, nothing from a stop string on at all. At
    the end the calls (if any) follow as `tool_calls` deltas and any prose not yet sent (e.g.
    after the calls) as a last content delta.
    """

    def __init__(self, model: str, stops: tuple[str, ...] = ()) -> None:
        self.model, self.id, self.created = model, f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        self.stops, self.sent = stops, ""

    def chunk(
        self, delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None
    ) -> dict[str, Any]:
        payload = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage is not None:
            payload["choices"], payload["usage"] = [], usage
        return payload

    def update(self, text: str) -> dict[str, Any] | None:
        """A content delta for what `text` (the whole reply so far) adds, or None."""
        text = cut_at_stop(text, self.stops)
        tag = text.find(TOOL_CALL_TAG)
        safe = text[:tag] if tag >= 0 else _without_pending(text, (TOOL_CALL_TAG, *self.stops))
        safe = safe.rstrip().rstrip("\ufffd")
        if len(safe) <= len(self.sent) or not safe.startswith(self.sent):
            return None
        delta, self.sent = safe[len(self.sent) :], safe
        return self.chunk({"content": delta})

    def finish(self, text: str, finish: str) -> list[dict[str, Any]]:
        """The closing chunks for the complete reply `text`."""
        message, has_calls = reply_message(cut_at_stop(text, self.stops))
        content = message["content"] or ""
        sent = self.sent.strip() if has_calls else self.sent  # tool-call replies' content is stripped
        chunks = []
        if content.startswith(sent) and len(content) > len(sent):
            chunks.append(self.chunk({"content": content[len(sent) :]}))
        for index, call in enumerate(message.get("tool_calls", [])):
            chunks.append(self.chunk({"tool_calls": [{"index": index, **call}]}))
        chunks.append(self.chunk({}, "tool_calls" if has_calls and finish == "stop" else finish))
        return chunks


def _without_pending(text: str, markers: tuple[str, ...]) -> str:
    """`text` without a trailing piece that could be the start of one of `markers`."""
    for size in range(min(max(map(len, markers)) - 1, len(text)), 0, -1):
        if any(marker.startswith(text[-size:]) for marker in markers):
            return text[:-size]
    return text
