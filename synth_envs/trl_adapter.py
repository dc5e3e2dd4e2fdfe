"""Expose any Environment to TRL's `GRPOTrainer(environment_factory=...)` (TRL 1.16).

TRL builds one instance per rollout from a zero-argument factory, lists the public methods of
the instance's class as tools (their JSON schemas come from type hints and Google docstrings via
`transformers.utils.get_json_schema`), calls `reset(**dataset_row)` before each rollout (a
returned string is appended to the last user message) and, when the class defines
`get_reward()`, calls it once per finished rollout as a reward source.

`trl_environment_class(family, **knobs)` builds such a class for a family: one method per tool,
with the signature and type hints of the family's typed tool and a docstring describing every
parameter (transformers requires one per parameter; undocumented ones read "the <name>"), so
transformers derives the tool's JSON schema from it, plus `submit_answer(answer)`, because in TRL
the text of the final assistant turn never reaches the environment; the episode's reward is the
environment's reward once the answer is submitted, 0.0 otherwise. `trl_dataset(family, seeds)`
gives the matching prompt dataset (one row per seed, carrying the seed that `reset` reads).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from tracegym.synth_envs.base import Environment
from tracegym.synth_envs.registry import get_family
from tracegym.synth_envs.tools import Tool
from tracegym.toolcalls import render_tool_call

RESERVED = ("reset", "get_reward", "submit_answer")


def _tool_method(tool: Tool) -> Callable[..., str]:
    """A method with the tool's signature, type hints and docstring that steps the wrapped env."""
    name = tool.name

    def method(self: TRLEnvironment, **arguments: Any) -> str:
        return self._call_tool(name, {k: v for k, v in arguments.items() if v is not None})

    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.signature(tool.function).replace(return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**typing.get_type_hints(tool.function), "return": str}
    described = [
        f"    {p.name}: {p.schema.get('description', 'the ' + p.name.replace('_', ' '))}"
        for p in tool.parameters.values()
    ]
    method.__doc__ = tool.description + ("\n\nArgs:\n" + "\n".join(described) if described else "")
    return method


class TRLEnvironment:
    """Base of the generated classes: wraps one Environment instance per rollout."""

    family: str = ""
    knobs: dict[str, Any] = {}

    def __init__(self) -> None:
        cls = get_family(self.family)
        self.env: Environment = cls(cls.Config(**self.knobs))
        self.finished = False
        self.reward = 0.0

    def reset(self, seed: int | None = None, **row: Any) -> str:
        """Start the episode of the row's `seed`; returns the task, appended to the user turn."""
        if seed is None:
            raise ValueError("the dataset row needs a 'seed' column (see trl_dataset)")
        self.finished, self.reward = False, 0.0
        return self.env.reset(int(seed))

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if self.finished or self.env.ended:
            return "error: the episode is over"
        result = self.env.step(render_tool_call(name, arguments))
        if result.ended:
            self.finished, self.reward = True, result.reward
        text = result.observation.strip()
        return text.removeprefix("<tool_response>").removesuffix("</tool_response>").strip()

    def submit_answer(self, answer: str) -> str:
        """Submit the final answer to the user's request; this ends the task.

        Args:
            answer: the final answer, in the format the instructions ask for
        """
        if self.finished or self.env.ended:
            return "error: the episode is over"
        result = self.env.step(answer if answer.strip() else " ")
        self.finished, self.reward = True, result.reward
        return "answer recorded"

    def get_reward(self) -> float:
        """The environment's reward for the rollout (0.0 if no answer was submitted)."""
        return float(self.reward)


def trl_environment_class(family: str, **knobs: Any) -> type[TRLEnvironment]:
    """A TRL environment class for `family` at `knobs`; pass the class itself as `environment_factory`."""
    cls = get_family(family)
    methods: dict[str, Any] = {"family": cls.name, "knobs": dict(knobs)}
    for tool in cls(cls.Config(**knobs)).offered.values():
        if tool.name in RESERVED:
            raise ValueError(f"{family}: tool name '{tool.name}' collides with the TRL adapter's own methods")
        methods[tool.name] = _tool_method(tool)
    name = "".join(part.title() for part in cls.name.split("_")) + "TRLEnv"
    return type(name, (TRLEnvironment,), methods)


def trl_dataset(family: str, seeds: range | list[int], **knobs: Any) -> Any:
    """A `datasets.Dataset` of prompts (system: the family's instructions) with a `seed` column."""
    import datasets

    cls = get_family(family)
    instructions = (
        cls(cls.Config(**knobs)).instructions + "\nWhen you are done, call submit_answer with your final answer."
    )
    rows = [
        {"prompt": [{"role": "system", "content": instructions}, {"role": "user", "content": ""}], "seed": int(seed)}
        for seed in seeds
    ]
    return datasets.Dataset.from_list(rows)
