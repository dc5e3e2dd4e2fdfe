"""The environment protocol: what rollouts, calibration and evaluation need from any environment.

An episode is a multi-turn dialogue driven by raw assistant text:

    task = env.reset(seed)                  # the first user message
    system = env.system_prompt              # instructions, tools and the call format
    result = env.step(assistant_text)       # a tool call is answered; plain text: see below
    ... until result.terminated or result.truncated

A plain-text turn (no tool call) ends the episode in a synthetic family: it is the final answer.
In an environment with a user (the eval stage's target environments) it is a message to the user,
whose reply is the observation (a plain user message), and the episode terminates when the user
ends the conversation. As in gymnasium, the two ways an episode ends are separate flags:
`terminated` (final answer given, or the user ended) and `truncated` (cut at `max_turns`; the
observation of that last turn is still returned). `reward` is 0.0 until the episode ends, then in [0, 1].
Actions are text in the format of `tracegym.toolcalls`; a malformed action is answered with an
error observation and counted in `errors`, never raised.

`oracle(seed)` (assistant turns that earn 1.0) fits turn budgets; `gold_answer(seed)` is what
turn credit teacher-forces; `hint(seed)` is guidance for hinted rollouts. All three leave the
episode in progress untouched. The same seed gives the same episode on any machine.

Synthetic families implement it in `tracegym.synth_envs.base`; a target environment of the eval
stage implements the same methods.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class StepResult:
    """One step's outcome; `info` holds counters ("errors", "turns") and, at the end, the
    environment's "reward_breakdown"."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        """True when the episode is over (terminated or truncated)."""
        return self.terminated or self.truncated


@runtime_checkable
class Environment(Protocol):
    """A seeded, verifiable, multi-turn tool environment (see the module docstring)."""

    name: str
    max_turns: int  # assistant turns before the episode is truncated
    turns: int  # assistant turns stepped in the current episode
    errors: int  # malformed or rejected calls in the current episode

    @property
    def key(self) -> Hashable:
        """Identifies the episode distribution: equal keys give the same episode for the same seed."""
        ...

    @property
    def system_prompt(self) -> str:
        """Instructions, tool descriptions and the call format (hints are appended by the caller)."""
        ...

    def reset(self, seed: int) -> str:
        """Start the episode of `seed`; returns the first user message."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply one assistant turn."""
        ...

    def hint(self, seed: int) -> str:
        """Guidance for hinted rollouts of `seed` (stripped from the prompt before the update)."""
        ...

    def oracle(self, seed: int) -> list[str]:
        """Assistant turns (tool calls, then a final answer) that earn 1.0 on `seed`."""
        ...

    def gold_answer(self, seed: int) -> str:
        """The final answer turn credit teacher-forces for `seed`."""
        ...
