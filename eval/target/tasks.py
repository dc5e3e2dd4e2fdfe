"""Task instances of the hotel desk: a kind × a seed, and the train / held-out splits.

A seed names one task: seeds 0..train_tasks-1 are the train split, seeds from `HELDOUT_BASE`
(1,000,000) on the held-out split (defaults 70 and 42, see `TargetConfig`). The kind is
`KINDS[ordinal % 7]` (ordinal = seed minus the split's first seed), so each split holds every kind
in turn. The records a task is about come from the split's own pool of guests
(`database.pool_of`), so no guest appears in both splits; they are picked in a fixed shuffled
order of the kind's candidates, so a kind repeats no record within a split until its candidates
run out. The task id is `<kind>-<seed>`; `kinds.make_task` builds it. Same database seed and
task seed, same task, on any machine.

A `Task` holds everything the episode needs: the guest's request (stated up front), the details
they give when asked, their answer to a confirmation question, their pushback after a refusal,
the gold actions, the information to communicate, the oracle turns, plausible wrong
trajectories, a hint, the slips (per capability of the kind, the oracle dialogue with that
capability's characteristic mistake; `kinds` says which) and the request key (the parts of the
request that decide its answer).

Disjoint splits: a held-out task never asks what a train task of the same kind asks (equal
`request_key`s) in the train split of the same size (`kinds.make_task`). For most kinds the key
names records of the split's own guests, so the pools keep it apart; book_cheapest asks about the
hotels every guest shares, so a held-out one that would repeat a train request is redrawn.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from tracegym.analysis.detectors import canonical
from tracegym.eval.target.config import HELDOUT_BASE, TargetConfig
from tracegym.eval.target.database import Database
from tracegym.schema import ToolCall
from tracegym.toolcalls import render_tool_call

SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class GoldAction:
    """A tool call the task requires; `compare_args` names the arguments compared (None: all)."""

    name: str
    arguments: dict[str, Any]
    compare_args: tuple[str, ...] | None = None

    def matches(self, call: ToolCall) -> bool:
        keys = self.arguments if self.compare_args is None else self.compare_args
        return call.name == self.name and all(
            canonical(call.arguments.get(k)) == canonical(self.arguments[k]) for k in keys
        )

    @property
    def text(self) -> str:
        """The call in the policy's tool-call format."""
        return render_tool_call(self.name, self.arguments)

    def tau2(self, action_id: str) -> dict[str, Any]:
        """The action as a τ²-bench task lists it."""
        return {
            "action_id": action_id,
            "requestor": "assistant",
            "name": self.name,
            "arguments": self.arguments,
            "info": None,
            "compare_args": None if self.compare_args is None else list(self.compare_args),
        }


@dataclass(frozen=True)
class Task:
    """One task instance (see the module docstring); `facts` maps a topic the agent may ask about
    (email, name, reservation, dates, payment, city, room) to the guest's answer."""

    id: str
    seed: int
    split: str
    kind: str
    capabilities: tuple[str, ...]
    guest_id: str
    request: str
    facts: dict[str, str]
    scenario: dict[str, Any]  # τ² user_scenario.instructions, for a model-driven user and Results files
    actions: tuple[GoldAction, ...]
    communicate: tuple[str, ...]
    oracle: tuple[str, ...]
    wrong: tuple[tuple[str, ...], ...]
    hint: str
    confirm: bool = True  # the guest's answer to a confirmation question
    pushback: str | None = None  # what the guest says after the first refusal (pressure kinds)
    notes: dict[str, Any] = field(default_factory=dict)  # the variant and the records involved
    # capability -> the oracle dialogue with that capability's one characteristic mistake (see `kinds`)
    slips: dict[str, tuple[str, ...]] = field(default_factory=dict)
    request_key: tuple[str, ...] = ()  # what decides the answer: tasks of a kind with equal keys ask the same


def split_of(seed: int) -> str:
    return "heldout" if seed >= HELDOUT_BASE else "train"


def split_seeds(config: TargetConfig, split: str) -> list[int]:
    """The seeds of `split` ("train" or "heldout")."""
    if split == "train":
        return list(range(config.train_tasks))
    if split == "heldout":
        return list(range(HELDOUT_BASE, HELDOUT_BASE + config.heldout_tasks))
    raise ValueError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")


@dataclass
class Draw:
    """What a kind's builder draws from: the database, the split's guest pool, the task's ordinal
    within its kind (`index`) and a random generator of the task seed."""

    db: Database
    seed: int
    split: str
    index: int
    rng: random.Random

    def pick(self, name: str, candidates: list[Any], index: int | None = None) -> Any:
        """Candidate number `index` (default: `self.index`) of a fixed shuffle of `candidates`."""
        if not candidates:
            raise RuntimeError(f"hotel database {self.db.seed}: no candidates for {name} in the {self.split} pool")
        order = sorted(candidates)
        random.Random(f"{self.db.seed}-{name}-{self.split}").shuffle(order)
        return order[(self.index if index is None else index) % len(order)]

    def guests(self) -> list[dict[str, Any]]:
        return [self.db.guests[gid] for gid in self.db.pool(self.split)]
