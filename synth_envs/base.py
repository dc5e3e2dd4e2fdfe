"""The environment API every capability family implements.

An episode is a multi-turn, tool-using dialogue:

    observation = env.reset(seed)            # the task, as the first user message
    env.system_prompt                        # instructions + tool schemas + call format
    result = env.step(assistant_text)        # a tool call -> tool response; plain text -> final
    ...until result.done; result.reward is in [0, 1]

Actions are raw assistant text in the format of `tracegym.toolcalls`. Malformed calls, unknown
tools and wrong argument types become error observations (counted in `info["errors"]`), never
exceptions. The same seed gives the same episode on any machine (only `random.Random(seed)` and
`numpy.random.default_rng(seed)` draw randomness).

A family subclasses `Environment`, declares a `Config` dataclass of difficulty knobs, and
implements `_generate`, `_call`, `_score` and `oracle`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from tracegym.schema import Message, ToolCall
from tracegym.toolcalls import parse_tool_calls, render_tool_response, tools_system_prompt


@dataclass
class StepResult:
    """What `step` returns; `reward` is 0 until the episode ends."""

    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class ToolError(Exception):
    """Raised by a family's `_call` for a call the tool rejects; becomes an error observation."""


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def validate_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """Check arguments against a tool's JSON schema (required, types, enums); None when valid."""
    parameters = schema.get("parameters", {})
    properties: dict[str, Any] = parameters.get("properties", {})
    for name in parameters.get("required", []):
        if name not in arguments:
            return f"missing required argument '{name}'"
    for name, value in arguments.items():
        if name not in properties:
            return f"unknown argument '{name}'"
        spec = properties[name]
        expected = _JSON_TYPES.get(spec.get("type", ""), ())
        is_bool_for_number = isinstance(value, bool) and spec.get("type") in ("integer", "number")
        if expected and (not isinstance(value, expected) or is_bool_for_number):
            return f"argument '{name}' must be of type {spec['type']}, got {type(value).__name__}"
        if "enum" in spec and value not in spec["enum"]:
            return f"argument '{name}' must be one of {spec['enum']}, got {value!r}"
    return None


class Environment(ABC):
    """A seeded, verifiable, multi-turn tool environment for one capability."""

    name: ClassVar[str]
    capability: ClassVar[str]
    description: ClassVar[str]
    Config: ClassVar[type]
    max_turns: ClassVar[int] = 12

    def __init__(self, config: Any = None, **knobs: Any) -> None:
        self.config = config if config is not None else self.Config(**knobs)
        self.seed: int | None = None
        self.turns = 0
        self.errors = 0
        self.calls: list[ToolCall] = []
        self.done = False

    # -- what a family implements ------------------------------------------------------------

    @property
    @abstractmethod
    def tools(self) -> list[dict[str, Any]]:
        """Tool schemas in OpenAI function format: {"name", "description", "parameters"}."""

    @property
    @abstractmethod
    def instructions(self) -> str:
        """The policy or role text that opens the system prompt."""

    @abstractmethod
    def _generate(self, seed: int) -> str:
        """Build the episode's hidden state for `seed`; return the task text the user sends."""

    @abstractmethod
    def _call(self, call: ToolCall) -> Any:
        """Run one validated tool call; return a JSON-serialisable result or raise ToolError."""

    @abstractmethod
    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        """Reward in [0, 1] for the episode ending with `final_answer`, plus its breakdown."""

    @abstractmethod
    def oracle(self, seed: int) -> list[str]:
        """Assistant turns (tool calls, then a final answer) that earn reward 1.0 on `seed`."""

    def gold_answer(self, seed: int) -> str:
        """The text turn credit teacher-forces: by default the oracle's final answer."""
        return self.oracle(seed)[-1]

    def hint(self, seed: int) -> str:
        """Guidance added to the system prompt of some rollouts (stripped before the update)."""
        return ""

    # -- the shared episode loop ---------------------------------------------------------------

    @property
    def system_prompt(self) -> str:
        return tools_system_prompt(self.instructions, self.tools)

    def knobs(self) -> dict[str, Any]:
        return asdict(self.config)

    def reset(self, seed: int) -> str:
        """Start the episode for `seed`; returns the first user message."""
        self.seed, self.turns, self.errors, self.calls, self.done = seed, 0, 0, [], False
        return self._generate(seed)

    def step(self, action: str) -> StepResult:
        """Apply one assistant turn. Tool calls are answered; plain text ends the episode."""
        if self.seed is None or self.done:
            raise RuntimeError(f"{self.name}: call reset(seed) before step()")
        self.turns += 1
        turn = parse_tool_calls(action)
        if turn.is_final_answer:
            return self._finish(turn.text)
        responses = [f"error: {error.reason}" for error in turn.errors]
        self.errors += len(turn.errors)
        for call in turn.calls:
            responses.append(self._answer(call))
        if self.turns >= self.max_turns:
            return self._finish("", observation=render_tool_response("\n".join(responses)), truncated=True)
        observation = render_tool_response("\n".join(responses))
        return StepResult(observation, 0.0, False, {"errors": self.errors, "turns": self.turns})

    def _answer(self, call: ToolCall) -> str:
        schema = next((tool for tool in self.tools if tool["name"] == call.name), None)
        if schema is None:
            self.errors += 1
            return f"error: unknown tool '{call.name}'"
        problem = validate_arguments(schema, call.arguments)
        if problem is not None:
            self.errors += 1
            return f"error: {call.name}: {problem}"
        self.calls.append(call)
        try:
            return json.dumps(self._call(call))
        except ToolError as error:
            self.errors += 1
            return f"error: {call.name}: {error}"

    def _finish(self, final_answer: str, observation: str = "", truncated: bool = False) -> StepResult:
        self.done = True
        reward, breakdown = self._score(final_answer)
        if not 0.0 <= reward <= 1.0:
            raise AssertionError(f"{self.name}: reward {reward} outside [0, 1]")
        info = {"errors": self.errors, "turns": self.turns, "truncated": truncated, "reward_breakdown": breakdown}
        return StepResult(observation, reward, True, info)


def play(env: Environment, seed: int, actions: list[str], hint: bool = False) -> tuple[list[Message], StepResult]:
    """Run scripted assistant turns on `seed`; returns the dialogue and the last step's result."""
    system = env.system_prompt + (f"\n\nHint: {env.hint(seed)}" if hint else "")
    messages = [Message(role="system", content=system), Message(role="user", content=env.reset(seed))]
    result = StepResult("", 0.0, False)
    for action in actions:
        messages.append(Message(role="assistant", content=action))
        result = env.step(action)
        if result.done:
            break
        messages.append(Message(role="user", content=result.observation))
    return messages, result
