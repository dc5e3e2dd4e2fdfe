"""Degenerate policies: the cheap strategies a policy under RL could collapse to instead of learning.

Five scripted policies (`tracegym.synth_envs.calibration.Policy`), each a pure function of the
episode, the seed, the rollout and what the episode has shown so far:

- `refuse`: the oracle's first turn (the reads a competent agent starts with), then a refusal
  in the format precondition_verification asks for, naming the first rule ("REFUSED: R1");
- `answer_without_acting`: at once, the final answer the family's oracle gives most often over
  `REFERENCE_SEEDS` other episodes at the same knobs (the best constant guess);
- `do_nothing`: at once, "OK.";
- `random_valid_calls`: calls of offered tools chosen at random, with type-correct arguments drawn
  from the text the episode has shown (task and observations); each turn ends the episode with
  "Done." with probability `STOP`;
- `repeat_first_tool`: the oracle's first tool call, every turn, until the turn budget ends.

A family whose reward these earn much of trains the shortcut, not the capability:
`tests/test_envs_degenerate.py` holds every family's mean at default knobs under the calibration
band's low end over 200 seeds, and `benchmarks/envs.py` prints the table (`degenerate_means`).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tracegym.synth_envs.base import Environment
from tracegym.synth_envs.calibration import Policy, policy_measure
from tracegym.toolcalls import parse_tool_calls, render_tool_call

REFUSAL = "REFUSED: R1"  # the refusal format precondition_verification asks for, naming its first rule
REFERENCE_SEEDS = range(1_000_000, 1_000_050)  # disjoint from the seeds any test or benchmark plays
STOP = 0.1  # chance per turn that random play ends with a final answer
_TOKEN = re.compile(r"[#\w][\w#@.:/-]*")


class NamedPolicy(Policy, Protocol):
    """A calibration `Policy` with a name for tables."""

    name: str


def _rng(name: str, seed: int, rollout: int, turn: int) -> random.Random:
    return random.Random(f"{name}/{seed}/{rollout}/{turn}")  # str seeds are hashed the same in every process


def _first_call(env: Environment, seed: int) -> str | None:
    """The oracle's first tool call as a one-call turn (None when the oracle makes no call)."""
    for turn in env.oracle(seed):
        calls = parse_tool_calls(turn).calls
        if calls:
            return render_tool_call(calls[0].name, calls[0].arguments)
    return None


@dataclass
class Refuse:
    """The oracle's first turn when it calls tools, then a refusal."""

    name: str = "refuse"

    def act(self, env: Environment, seed: int, rollout: int, turn: int, observation: str) -> str:
        first = env.oracle(seed)[0]
        if turn == 0 and parse_tool_calls(first).calls:
            return first
        return REFUSAL


@dataclass
class AnswerWithoutActing:
    """The most frequent oracle final answer of other episodes, at once."""

    name: str = "answer_without_acting"
    answers: dict[Hashable, str] = field(default_factory=dict)  # env.key -> the constant answer

    def act(self, env: Environment, seed: int, rollout: int, turn: int, observation: str) -> str:
        if env.key not in self.answers:
            twin = type(env)(env.config)
            twin.verify = False  # only the answers' frequencies matter, not the episodes' checks
            counts = Counter(twin.oracle(s)[-1] for s in REFERENCE_SEEDS)
            self.answers[env.key] = counts.most_common(1)[0][0]
        return self.answers[env.key]


@dataclass
class DoNothing:
    """Ends the episode at once without a call."""

    name: str = "do_nothing"

    def act(self, env: Environment, seed: int, rollout: int, turn: int, observation: str) -> str:
        return "OK."


@dataclass
class RandomValidCalls:
    """Random offered tools with type-correct arguments drawn from the text the episode has shown."""

    name: str = "random_valid_calls"
    shown: list[str] = field(default_factory=list)  # the current episode's task and observations

    def act(self, env: Environment, seed: int, rollout: int, turn: int, observation: str) -> str:
        if turn == 0:
            self.shown = []
        self.shown.append(observation)
        rng = _rng(self.name, seed, rollout, turn)
        if rng.random() < STOP:
            return "Done."
        spec = rng.choice(env.tools)
        parameters = spec["parameters"]
        arguments = {
            name: _value(schema, rng, self.shown)
            for name, schema in parameters["properties"].items()
            if name in parameters.get("required", ()) or rng.random() < 0.5
        }
        return render_tool_call(spec["name"], arguments)


def _value(schema: dict[str, Any], rng: random.Random, texts: list[str]) -> Any:
    """A value of the schema's type, taken from the shown texts where the type allows."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    words = [w for text in texts for w in _TOKEN.findall(text)]
    numbers = [float(w) for w in words if re.fullmatch(r"-?\d+(?:\.\d+)?", w)] or [0.0, 1.0]
    if kind == "integer":
        return int(rng.choice(numbers))
    if kind == "number":
        return rng.choice(numbers)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_value(schema.get("items", {"type": "string"}), rng, texts) for _ in range(rng.randrange(1, 4))]
    if kind == "object":
        return {}
    lines = [line.strip() for text in texts for line in text.splitlines() if line.strip()]
    return rng.choice(lines if lines and rng.random() < 0.5 else words or ["x"])


@dataclass
class RepeatFirstTool:
    """The oracle's first tool call, every turn (a plain refusal when the oracle calls nothing)."""

    name: str = "repeat_first_tool"

    def act(self, env: Environment, seed: int, rollout: int, turn: int, observation: str) -> str:
        return _first_call(env, seed) or REFUSAL


def policies() -> list[NamedPolicy]:
    """The five degenerate policies, fresh (random play keeps per-episode memory)."""
    return [Refuse(), AnswerWithoutActing(), DoNothing(), RandomValidCalls(), RepeatFirstTool()]


def degenerate_means(family: str, knobs: dict[str, Any], seeds: Sequence[int]) -> dict[str, float]:
    """Mean reward of each degenerate policy over `seeds` (one rollout each), by policy name."""
    means = {}
    for policy in policies():
        groups = policy_measure(policy)(family, knobs, seeds, 1)
        means[policy.name] = sum(g[0] for g in groups) / len(groups)
    return means
