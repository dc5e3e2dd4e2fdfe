"""`TargetConfig`: the settings of the target environment (light: no torch, flags via tracegym.config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from tracegym.config import check_choice, option

UserKind = Literal["scripted", "model"]
PromptStyle = Literal["full", "compact"]
HELDOUT_BASE = 1_000_000  # the first held-out seed; train seeds are 0..train_tasks-1


@dataclass
class TargetConfig:
    """The hotel reservation desk: its database, its task splits and the user that talks to the agent."""

    flag_prefix: ClassVar[str] = "target"

    domain_seed: int = option(0, "seed of the generated database (hotels, guests, reservations) and of task generation")
    train_tasks: int = option(70, "task instances in the train split (seeds 0..N-1; 10 of each of the 7 kinds)")
    heldout_tasks: int = option(42, "task instances in the held-out split (seeds from 1000000; 6 of each kind)")
    max_turns: int = option(30, "assistant turns (tool calls and messages) before an episode is truncated")
    turn_slack: int | None = option(
        None,
        "turns an episode gets beyond its task's oracle dialogue, capped at max_turns (None: max_turns for every task)",
    )
    prompt: PromptStyle = option(
        "full",
        "system prompt: the policy with the tools' JSON schemas (full, ~2,100 tokens) or with one-line tool "
        "signatures (compact, ~1,340 tokens; same policy, tools and grading)",
    )
    user: UserKind = option(
        "scripted", "who plays the guest: the deterministic scripted user or a model behind --target-user-url"
    )
    user_url: str | None = option(
        None, "OpenAI-compatible API base of the model-driven user, e.g. http://127.0.0.1:8000/v1"
    )
    user_model: str = option("user", "model name sent to the user endpoint")
    user_timeout: float = option(60.0, "seconds to wait for one reply of the model-driven user")

    def __post_init__(self) -> None:
        if self.train_tasks < 0 or self.heldout_tasks < 0:
            raise ValueError(f"split sizes must be >= 0, got train {self.train_tasks}, held-out {self.heldout_tasks}")
        if self.train_tasks > HELDOUT_BASE:
            raise ValueError(
                f"train_tasks must be <= {HELDOUT_BASE} (held-out seeds start there), got {self.train_tasks}"
            )
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.turn_slack is not None and self.turn_slack < 0:
            raise ValueError(f"turn_slack must be >= 0 or None, got {self.turn_slack}")
        check_choice("prompt", self.prompt, PromptStyle)
        if not self.user_timeout > 0:
            raise ValueError(f"user_timeout must be > 0 seconds, got {self.user_timeout}")
        if self.user == "model" and not self.user_url:
            raise ValueError("user 'model' needs user_url (--target-user-url)")
        check_choice("user", self.user, UserKind)
