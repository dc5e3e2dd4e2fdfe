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

To train on exactly the conversations tracegym's own trainer sees (benchmarks/vs_trl.py), build the
class with `answer_tool=False` (no `submit_answer`: a plain-text turn is the final answer, scored by
`final_answer_reward`), the dataset with `tracegym_prompt=True` (tracegym's system prompt, tools and
call format included) and the tokenizer with `tracegym_chat_template(tokenizer)`, which renders
tool calls and results as `tracegym.generation.render_chat` does and parses Hermes `<tool_call>`s.
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
    """Base of the generated classes: wraps one Environment instance per rollout. A plain-text turn
    is scored by `final_answer_reward`; `AnswerToolEnvironment` adds the `submit_answer` tool."""

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

    def _answer(self, text: str) -> float:
        """End the episode with the final answer `text` (an empty one when blank) unless it has
        ended; returns the episode's reward."""
        if not (self.finished or self.env.ended):
            result = self.env.step(text if text.strip() else " ")
            self.finished, self.reward = True, result.reward
        return float(self.reward)


class AnswerToolEnvironment(TRLEnvironment):
    """A TRLEnvironment whose episode ends with the `submit_answer` tool; TRL reads its reward from
    `get_reward`."""

    def submit_answer(self, answer: str) -> str:
        """Submit the final answer to the user's request; this ends the task.

        Args:
            answer: the final answer, in the format the instructions ask for
        """
        if self.finished or self.env.ended:
            return "error: the episode is over"
        self._answer(answer)
        return "answer recorded"

    def get_reward(self) -> float:
        """The environment's reward for the rollout (0.0 if no answer was submitted)."""
        return float(self.reward)


def final_answer_reward(
    completions: list[list[dict[str, Any]]], environments: list[TRLEnvironment], **_: Any
) -> list[float]:
    """TRL reward function for classes built with `answer_tool=False`: a rollout's last assistant
    turn, when it calls no tool, is its final answer; one that ends on a tool call or result (its
    turns ran out) is scored with an empty answer, as a tracegym environment scores an episode out
    of turns. Unlike tracegym, which gives 0 to a turn cut by its token cap, a completion TRL cut at
    `max_completion_length` is scored from the text it ends with."""
    rewards = []
    for messages, environment in zip(completions, environments, strict=True):
        last = messages[-1] if messages else {}
        answered = last.get("role") == "assistant" and not last.get("tool_calls")
        rewards.append(environment._answer(str(last.get("content") or "") if answered else ""))
    return rewards


def trl_environment_class(family: str, answer_tool: bool = True, **knobs: Any) -> type[TRLEnvironment]:
    """A TRL environment class for `family` at `knobs`; pass the class itself as `environment_factory`.
    With `answer_tool` (default) the episode ends with `submit_answer`; without it, with a plain-text
    turn, and the trainer needs `final_answer_reward` among its reward functions."""
    cls = get_family(family)
    methods: dict[str, Any] = {"family": cls.name, "knobs": dict(knobs)}
    for tool in cls(cls.Config(**knobs)).offered.values():
        if tool.name in RESERVED:
            raise ValueError(f"{family}: tool name '{tool.name}' collides with the TRL adapter's own methods")
        methods[tool.name] = _tool_method(tool)
    name = "".join(part.title() for part in cls.name.split("_")) + "TRLEnv"
    return type(name, (AnswerToolEnvironment if answer_tool else TRLEnvironment,), methods)


def trl_dataset(family: str, seeds: range | list[int], tracegym_prompt: bool = False, **knobs: Any) -> Any:
    """A `datasets.Dataset` of prompts with a `seed` column. The system turn holds the family's
    instructions and asks for `submit_answer` (TRL renders the tools), or with `tracegym_prompt`
    the system prompt tracegym's own rollouts use (tools, call format, plain-text final answer)."""
    import datasets

    cls = get_family(family)
    env = cls(cls.Config(**knobs))
    if tracegym_prompt:
        system = env.system_prompt
    else:
        system = env.instructions + "\nWhen you are done, call submit_answer with your final answer."
    rows = [
        {"prompt": [{"role": "system", "content": system}, {"role": "user", "content": ""}], "seed": int(seed)}
        for seed in seeds
    ]
    return datasets.Dataset.from_list(rows)


# tracegym.generation.render_chat in an <|im_start|> template (SmolLM2's): tool calls appended to the
# assistant's text as <tool_call>{"name": …, "arguments": …}</tool_call> lines, the results of one
# turn's calls one user turn inside <tool_response> tags, a line each (as a tracegym environment
# answers them), and the tools left out (the system prompt already lists them).
TRACEGYM_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message.role != 'system' -%}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{%- endif -%}"
    "{%- if message.role == 'tool' -%}"
    "{%- if loop.previtem is defined and loop.previtem.role == 'tool' -%}{{ '\n' }}"
    "{%- else -%}{{ '<|im_start|>user\n<tool_response>\n' }}{%- endif -%}"
    "{{ message.content }}"
    "{%- if loop.nextitem is not defined or loop.nextitem.role != 'tool' -%}"
    "{{ '\n</tool_response><|im_end|>\n' }}{%- endif -%}"
    "{%- else -%}"
    "{%- set text = namespace(value=message.content or '') -%}"
    "{%- for call in message.tool_calls or [] -%}"
    "{%- set function = call.function if call.function is defined else call -%}"
    "{%- set text.value = text.value + '\n<tool_call>' + "
    "({'name': function.name, 'arguments': function.arguments} | tojson) + '</tool_call>' -%}"
    "{%- endfor -%}"
    "{{ '<|im_start|>' + message.role + '\n' + (text.value | trim) + '<|im_end|>\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)


def tracegym_chat_template(tokenizer: Any) -> Any:
    """A copy of an <|im_start|>-template tokenizer (SmolLM2's, the embedded model's) that renders
    conversations as tracegym's rollouts do and parses Hermes `<tool_call>` JSON in replies (TRL's
    Qwen3 response template), for TRL's GRPOTrainer."""
    import copy

    from trl.chat_template_utils import qwen3_template

    if "<|im_start|>" not in (tokenizer.chat_template or ""):
        raise ValueError("tracegym_chat_template needs a tokenizer whose chat template uses <|im_start|> turns")
    copied = copy.deepcopy(tokenizer)
    copied.chat_template = TRACEGYM_CHAT_TEMPLATE
    copied.response_template = qwen3_template
    return copied
