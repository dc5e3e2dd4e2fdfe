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

A family subclasses `Environment`, declares a `Config` dataclass of difficulty knobs, its
`tools` (JSON schemas) and `instructions` (class attributes, or properties), and implements
`_generate` (hidden state from a seed), `_call`, `_score` and `_oracle`; it may add `_reject`
(an episode check: a generated episode it rejects is regenerated from the next derived seed,
deterministically), `_wrong` (plausible wrong trajectories the verifier must score below 1) and
`_hint`. `oracle(seed)`, `hint(seed)`, `gold_answer(seed)` and `wrong_trajectories(seed)` work
on a private twin, so they never disturb the episode in progress.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from dataclasses import asdict, astuple, dataclass, field
from typing import Any, ClassVar, Iterator

from tracegym.schema import Message, ToolCall
from tracegym.toolcalls import parse_tool_calls, render_tool_response, to_json, tools_system_prompt


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


_SYSTEM_PROMPTS: dict[tuple[type, tuple], str] = {}  # (family, knob values) -> prompt


def derive_seed(seed: int, attempt: int) -> int:
    """The generator seed of regeneration `attempt` of `seed` (attempt 0 is `seed` itself)."""
    return seed if attempt == 0 else (seed * 1_000_003 + attempt * 7_919) % (2**63)


class Environment(ABC):
    """A seeded, verifiable, multi-turn tool environment for one capability."""

    name: ClassVar[str]
    capability: ClassVar[str]
    description: ClassVar[str]
    Config: ClassVar[type]
    # tool schemas in OpenAI function format: {"name", "description", "parameters"}
    tools: ClassVar[list[dict[str, Any]]]
    # the policy or role text that opens the system prompt (a property where it depends on knobs)
    instructions: ClassVar[str]
    max_turns: ClassVar[int] = 12
    max_attempts: ClassVar[int] = 50
    # knob settings from easy to hard, searched by calibration (each a partial Config)
    ladder: ClassVar[tuple[dict[str, Any], ...]] = ()

    def __init__(self, config: Any = None, **knobs: Any) -> None:
        self.config = config if config is not None else self.Config(**knobs)
        self.seed: int | None = None
        self.turns = 0
        self.errors = 0
        self.calls: list[ToolCall] = []
        self.done = False
        self.attempts = 0
        self.rejections: list[str] = []
        self.generator_seed: int | None = None
        self.verify = True
        self._twin: Environment | None = None
        self._twin_seed: int | None = None

    # -- what a family implements ------------------------------------------------------------

    @abstractmethod
    def _generate(self, seed: int) -> str:
        """Build the episode's hidden state for `seed`; return the task text the user sends."""

    def _reject(self) -> str | None:
        """Why the episode just generated is unusable (None when it passes); it is then regenerated."""
        return None

    @abstractmethod
    def _call(self, call: ToolCall) -> Any:
        """Run one validated tool call; return a JSON-serialisable result or raise ToolError."""

    @abstractmethod
    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        """Reward in [0, 1] for the episode ending with `final_answer`, plus its breakdown."""

    @abstractmethod
    def _oracle(self) -> list[str]:
        """Assistant turns that earn reward 1.0 on the freshly generated (not yet stepped) episode."""

    def _wrong(self) -> list[list[str]]:
        """Plausible wrong trajectories for the fresh episode; each must earn less than 1."""
        return []

    def _hint(self) -> str:
        return ""

    def _fresh(self, seed: int) -> "Environment":
        """A twin environment freshly reset to `seed` (cached for the last seed asked)."""
        if self._twin is None or self._twin_seed != seed:
            twin = type(self)(self.config)
            if seed == self.seed:  # already verified here: rebuild the accepted episode directly
                twin.verify = False
                twin.reset(self.generator_seed)
            else:
                twin.verify = self.verify
                twin.reset(seed)
            self._twin, self._twin_seed = twin, seed
        return self._twin

    def oracle(self, seed: int) -> list[str]:
        """Assistant turns (tool calls, then a final answer) that earn reward 1.0 on `seed`."""
        return self._fresh(seed)._oracle()

    def wrong_trajectories(self, seed: int) -> list[list[str]]:
        """Plausible wrong solutions of `seed`, which the verifier must score below 1.0."""
        return self._fresh(seed)._wrong()

    def gold_answer(self, seed: int) -> str:
        """The text turn credit teacher-forces: by default the oracle's final answer."""
        return self.oracle(seed)[-1]

    def hint(self, seed: int) -> str:
        """Guidance added to the system prompt of some rollouts (stripped before the update)."""
        return self._fresh(seed)._hint()

    # -- the shared episode loop ---------------------------------------------------------------

    @property
    def system_prompt(self) -> str:
        """Instructions, tool schemas and call format (memoised per family and knobs)."""
        key = (type(self), self.knob_values)
        prompt = _SYSTEM_PROMPTS.get(key)
        if prompt is None:
            prompt = _SYSTEM_PROMPTS[key] = tools_system_prompt(self.instructions, self.tools)
        return prompt

    def knobs(self) -> dict[str, Any]:
        return asdict(self.config)

    @functools.cached_property
    def knob_values(self) -> tuple:
        """The knobs in `Config` field order: the hashable key of a family's memoised episodes.

        Computed once (an environment's config is fixed from construction on).
        """
        return astuple(self.config)

    def reset(self, seed: int) -> str:
        """Start the episode for `seed`; returns the first user message.

        Attempt 0 generates from `seed` itself; an episode that `_reject` or (when `self.verify`)
        the oracle checks of `tracegym.synth_envs.checks` reject is regenerated from derived seeds
        (`derive_seed(seed, attempt)`), so the accepted episode is still a pure function of `seed`.
        """
        from tracegym.synth_envs.checks import verify_generated

        self.seed, self.turns, self.errors, self.calls, self.done = seed, 0, 0, [], False
        self.rejections = []
        for attempt in range(self.max_attempts):
            self.attempts = attempt + 1
            self.generator_seed = derive_seed(seed, attempt)
            task = self._generate(self.generator_seed)
            problem = self._reject()
            if problem is None and self.verify:
                problem = verify_generated(self, self.generator_seed)
            if problem is None:
                return task
            self.rejections.append(problem)
        raise RuntimeError(f"{self.name}: no acceptable episode for seed {seed} in {self.max_attempts} attempts: {self.rejections[-3:]}")

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
            result = self._call(call)
            return result if isinstance(result, str) else to_json(result)
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


def _steps(env: Environment, actions: list[str]) -> Iterator[tuple[str, StepResult]]:
    """Step `actions` on the episode in progress until it ends; yields each action and its result."""
    for action in actions:
        result = env.step(action)
        yield action, result
        if result.done:
            return


def play(env: Environment, seed: int, actions: list[str], hint: bool = False) -> tuple[list[Message], StepResult]:
    """Run scripted assistant turns on `seed`; returns the dialogue and the last step's result."""
    system = env.system_prompt + (f"\n\nHint: {env.hint(seed)}" if hint else "")
    messages = [Message(role="system", content=system), Message(role="user", content=env.reset(seed))]
    result = StepResult("", 0.0, False)
    for action, result in _steps(env, actions):
        messages.append(Message(role="assistant", content=action))
        if not result.done:
            messages.append(Message(role="user", content=result.observation))
    return messages, result


def replay(env: Environment, seed: int, actions: list[str]) -> StepResult:
    """`play` without keeping the dialogue: the last step's result (what verification needs)."""
    env.reset(seed)
    result = StepResult("", 0.0, False)
    for _, result in _steps(env, actions):
        pass
    return result
