"""The base class of the capability families: the environment protocol of `tracegym.environment`.

A family is one module: a `Config` dataclass of difficulty knobs, a frozen world dataclass, and
a subclass of `Environment` that declares `name`, `capability`, `description`, `instructions`
(a class attribute, or a property where it depends on the knobs), its `ladder` of knob settings
(easy -> hard) and its tools as typed methods (`@tool`, see `tracegym.synth_envs.tools`), and
implements:

- `_generate(seed)`: the world, a frozen value computed from `seed` and `self.config` only;
- `_task()`: the first user message, from `self.world`;
- `_new_state()`: the episode's mutable state (`self.state`), when its tools change anything;
- `_score(final_answer)`: reward in [0, 1] and its breakdown, from world, state and `self.calls`;
- `_oracle()`: assistant turns that earn 1.0 on the fresh episode;
- optionally `_reject()` (why a world is unusable: it is regenerated from the next derived seed,
  deterministically), `_wrong()` (plausible wrong trajectories the verifier must score below 1),
  `_hint()`, and `_tool_names()` (the tools the knobs need, when some tools serve only some
  settings: the prompt lists only those, and the others are unknown tools).

The base class owns the episode loop and every memo: worlds (`Environment.worlds`, keyed by
family, knobs and generator seed) and system prompts (`Environment.prompts`, keyed by family and
knobs) are explicit bounded caches; the oracle-check verdicts are cached in
`tracegym.synth_envs.checks`. `reset` sets the episode state in one place: `world`, `state`,
`calls`, `turns`, `errors`, `ended`. Tool calls are checked against the tool's signature and
dispatched by name; malformed calls, unknown tools, bad arguments and `ToolError`s become error
observations (counted in `errors`), never exceptions. Only `random.Random(seed)` and
`numpy.random.default_rng(seed)` draw randomness, so a seed gives the same episode anywhere.
`oracle(seed)`, `hint(seed)`, `gold_answer(seed)` and `wrong_trajectories(seed)` work on a
private twin and never disturb the episode in progress.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator
from dataclasses import asdict
from typing import Any, ClassVar

from tracegym import environment
from tracegym.environment import StepResult
from tracegym.schema import Message, ToolCall
from tracegym.synth_envs.cache import BoundedCache
from tracegym.synth_envs.checks import verify_generated
from tracegym.synth_envs.tools import Tool, tools_of
from tracegym.toolcalls import parse_tool_calls, render_tool_response, to_json, tools_system_prompt


class ToolError(Exception):
    """Raised by a tool for a call it rejects; becomes an error observation."""


def derive_seed(seed: int, attempt: int) -> int:
    """The generator seed of regeneration `attempt` of `seed` (attempt 0 is `seed` itself)."""
    return seed if attempt == 0 else (seed * 1_000_003 + attempt * 7_919) % (2**63)


class Environment(environment.Environment, ABC):
    """A seeded, verifiable, multi-turn tool environment for one capability."""

    name: ClassVar[str]
    capability: ClassVar[str]
    description: ClassVar[str]
    Config: ClassVar[type]
    # the policy or role text that opens the system prompt (a property where it depends on knobs)
    instructions: ClassVar[str]
    max_turns: ClassVar[int] = 12
    max_attempts: ClassVar[int] = 50
    runs_code: ClassVar[bool] = False  # grading executes code, so playing needs the code sandbox
    # knob settings from easy to hard, searched by calibration (each a partial Config)
    ladder: ClassVar[tuple[dict[str, Any], ...]] = ()
    # this class's typed tools by name, collected when the class is defined
    tool_specs: ClassVar[dict[str, Tool]] = {}
    # (family, knobs, generator seed) -> world; (family, knobs) -> system prompt
    worlds: ClassVar[BoundedCache[Any]] = BoundedCache(256)
    prompts: ClassVar[BoundedCache[str]] = BoundedCache(256)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.tool_specs = tools_of(cls)
        clashes = [name for name in cls.tool_specs if hasattr(Environment, name)]
        if clashes:
            raise TypeError(f"{cls.__qualname__}: tool names clash with Environment attributes: {', '.join(clashes)}")

    def __init__(self, config: Any = None, **knobs: Any) -> None:
        self.config = config if config is not None else self.Config(**knobs)
        self.seed: int | None = None
        self.generator_seed: int | None = None
        self.attempts = 0
        self.rejections: list[str] = []
        self.verify = True  # run the oracle checks on every generated episode
        self.world: Any = None
        self.state: Any = None
        self.calls: list[ToolCall] = []
        self.turns = 0
        self.errors = 0
        self.ended = False
        self._twin: Environment | None = None
        self._twin_seed: int | None = None

    # -- what a family implements ------------------------------------------------------------

    @abstractmethod
    def _generate(self, seed: int) -> Any:
        """The world of generator seed `seed`: a frozen value of `seed` and `self.config` only."""

    @abstractmethod
    def _task(self) -> str:
        """The first user message of the episode in `self.world`."""

    def _new_state(self) -> Any:
        """The mutable state a fresh episode of `self.world` starts from (None: tools change nothing)."""
        return None

    def _reject(self) -> str | None:
        """Why `self.world` is unusable (None when it passes); it is then regenerated."""
        return None

    @abstractmethod
    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        """Reward in [0, 1] for the episode ending with `final_answer`, plus its breakdown."""

    @abstractmethod
    def _oracle(self) -> list[str]:
        """Assistant turns that earn reward 1.0 on the freshly reset (not yet stepped) episode."""

    def _wrong(self) -> list[list[str]]:
        """Plausible wrong trajectories for the fresh episode; each must earn less than 1."""
        return []

    def _hint(self) -> str:
        return ""

    def _tool_names(self) -> tuple[str, ...]:
        """The tools episodes at these knobs need (default: all of the family's)."""
        return tuple(self.tool_specs)

    # -- knobs, tools, prompt ------------------------------------------------------------------

    def knobs(self) -> dict[str, Any]:
        return asdict(self.config)

    @functools.cached_property
    def key(self) -> Hashable:
        """(family class, knob name/value pairs): with a seed, it determines the episode."""
        return type(self), tuple(asdict(self.config).items())

    @functools.cached_property
    def offered(self) -> dict[str, Tool]:
        """The tools this environment offers at its knobs, by name (family definition order)."""
        names = set(self._tool_names())
        unknown = names - set(self.tool_specs)
        if unknown:
            raise ValueError(f"{self.name}: _tool_names lists tools the family lacks: {', '.join(sorted(unknown))}")
        return {name: spec for name, spec in self.tool_specs.items() if name in names}

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The offered tools' JSON schemas (OpenAI function format: name, description, parameters)."""
        return [spec.schema for spec in self.offered.values()]

    @property
    def system_prompt(self) -> str:
        """Instructions, tool schemas and call format (cached per family and knobs)."""
        return self.prompts.get(self.key, lambda: tools_system_prompt(self.instructions, self.tools))

    # -- episodes ------------------------------------------------------------------------------

    def reset(self, seed: int) -> str:
        """Start the episode for `seed`; returns the first user message.

        Attempt 0 generates from `seed` itself; a world that `_reject` or (when `self.verify`) the
        oracle checks of `tracegym.synth_envs.checks` reject is regenerated from derived seeds
        (`derive_seed(seed, attempt)`), so the accepted episode is still a pure function of `seed`.
        """
        self.seed, self.rejections = seed, []
        for attempt in range(self.max_attempts):
            self.attempts = attempt + 1
            self.generator_seed = derive_seed(seed, attempt)
            self.world = self.worlds.get((self.key, self.generator_seed), self._generate, self.generator_seed)
            problem = self._reject()
            if problem is None and self.verify:
                problem = verify_generated(self, self.generator_seed)
            if problem is None:
                self.state, self.calls, self.turns, self.errors, self.ended = self._new_state(), [], 0, 0, False
                return self._task()
            self.rejections.append(problem)
        raise RuntimeError(
            f"{self.name}: no acceptable episode for seed {seed} in {self.max_attempts} attempts: "
            f"{self.rejections[-3:]}"
        )

    def step(self, action: str) -> StepResult:
        """Apply one assistant turn. Tool calls are answered; plain text ends the episode."""
        if self.seed is None or self.ended:
            raise RuntimeError(f"{self.name}: call reset(seed) before step()")
        self.turns += 1
        turn = parse_tool_calls(action)
        if turn.is_final_answer:
            return self._finish(turn.text, "", truncated=False)
        responses = [f"error: {error.reason}" for error in turn.errors]
        self.errors += len(turn.errors)
        for call in turn.calls:
            responses.append(self._answer(call))
        observation = render_tool_response("\n".join(responses))
        if self.turns >= self.max_turns:
            return self._finish("", observation, truncated=True)
        return StepResult(observation, 0.0, False, False, {"errors": self.errors, "turns": self.turns})

    def _answer(self, call: ToolCall) -> str:
        spec = self.offered.get(call.name)
        if spec is None:
            self.errors += 1
            return f"error: unknown tool '{call.name}'"
        problem = spec.check(call.arguments)
        if problem is not None:
            self.errors += 1
            return f"error: {call.name}: {problem}"
        self.calls.append(call)
        try:
            result = spec.function(self, **call.arguments)
            return result if isinstance(result, str) else to_json(result)
        except ToolError as error:
            self.errors += 1
            return f"error: {call.name}: {error}"

    def _finish(self, final_answer: str, observation: str, truncated: bool) -> StepResult:
        self.ended = True
        reward, breakdown = self._score(final_answer)
        if not 0.0 <= reward <= 1.0:
            raise AssertionError(f"{self.name}: reward {reward} outside [0, 1]")
        info = {"errors": self.errors, "turns": self.turns, "reward_breakdown": breakdown}
        return StepResult(observation, reward, not truncated, truncated, info)

    def replay(self, seed: int, actions: list[str]) -> StepResult:
        """Reset to `seed` and step `actions` until the episode ends; the last step's result."""
        self.reset(seed)
        result = StepResult("", 0.0, False, False)
        for _, step in _steps(self, actions):
            result = step
        return result

    # -- the twin: oracle, wrong trajectories, hint --------------------------------------------

    def _fresh(self, seed: int) -> Environment:
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


def _steps(env: environment.Environment, actions: list[str]) -> Iterator[tuple[str, StepResult]]:
    """Step `actions` on the episode in progress until it ends; yields each action and its result."""
    for action in actions:
        result = env.step(action)
        yield action, result
        if result.ended:
            return


def play(
    env: environment.Environment, seed: int, actions: list[str], hint: bool = False
) -> tuple[list[Message], StepResult]:
    """Run scripted assistant turns on `seed`; returns the dialogue and the last step's result."""
    system = env.system_prompt + (f"\n\nHint: {env.hint(seed)}" if hint else "")
    messages = [Message(role="system", content=system), Message(role="user", content=env.reset(seed))]
    result = StepResult("", 0.0, False, False)
    for action, result in _steps(env, actions):
        messages.append(Message(role="assistant", content=action))
        if not result.ended:
            messages.append(Message(role="user", content=result.observation))
    return messages, result
