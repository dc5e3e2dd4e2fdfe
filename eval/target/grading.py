"""Grading an episode of the hotel desk, τ²-bench style, into a `reward_info` record.

Four checks, each 1.0 or 0.0, and the reward is their product (τ²'s `reward_basis`):
- DB: the final database equals the gold one (the database after the gold actions, applied by
  the same tools), compared as `Changes.snapshot`s;
- ACTION: every gold action was called (same name, equal compared arguments, in any order, with
  any other calls around it);
- COMMUNICATE: every piece of required information appears in the agent's messages to the guest:
  an amount as a number within half a cent (ISO dates and digits inside ids are not numbers
  here), anything else (a rule id, a phrase) as a whole word, ignoring case;
- NL_ASSERTION: the agent obtained the guest's explicit yes before every write that went through
  (checked deterministically: a write counts as confirmed when the guest's last reply was a yes
  and the agent has sent no message since).
"""

from __future__ import annotations

import re
from typing import Any

from tracegym.eval.target.database import Changes, Database
from tracegym.eval.target.tasks import Task
from tracegym.schema import ToolCall

REWARD_BASIS = ("DB", "ACTION", "COMMUNICATE", "NL_ASSERTION")
CONFIRMATION = "The agent obtained the guest's explicit confirmation (yes) before every write."
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_TOLERANCE = 0.005  # dollars


def numbers_in(text: str) -> list[float]:
    """The numbers written in `text` (thousands commas allowed), ISO dates and id digits left out."""
    return [float(found.replace(",", "")) for found in _NUMBER.findall(_ISO_DATE.sub(" ", text))]


def communicated(info: str, messages: list[str]) -> tuple[bool, str]:
    """Whether `info` appears in one of the agent's `messages`, and where (τ²'s justification)."""
    target = float(info) if _PLAIN_NUMBER.fullmatch(info) else None
    pattern = None if target is not None else re.compile(rf"(?<!\w){re.escape(info)}(?!\w)", re.IGNORECASE)
    for index, text in enumerate(messages):
        if target is not None and any(abs(value - target) <= _TOLERANCE for value in numbers_in(text)):
            return True, f"{info} is stated in the agent's message {index} to the guest"
        if pattern is not None and pattern.search(text):
            return True, f"'{info}' is stated in the agent's message {index} to the guest"
    return False, f"'{info}' is stated in none of the agent's {len(messages)} messages to the guest"


def grade(
    task: Task,
    db: Database,
    final: Changes,
    gold: Changes,
    calls: list[ToolCall],
    said: list[str],
    unconfirmed: list[str],
) -> dict[str, Any]:
    """The τ²-style `reward_info` of an episode: `final` and `gold` are the episode's and the gold
    changes, `calls` the agent's tool calls, `said` its messages to the guest, `unconfirmed` the
    writes it made without the guest's yes."""
    db_match = final.snapshot(db) == gold.snapshot(db)
    action_checks = []
    for index, action in enumerate(task.actions):
        matched = any(action.matches(call) for call in calls)
        action_checks.append(
            {"action": action.tau2(f"{task.id}_{index}"), "action_match": matched, "action_reward": float(matched)}
        )
    communicate_checks = []
    for info in task.communicate:
        met, why = communicated(info, said)
        communicate_checks.append({"info": info, "met": met, "justification": why})
    why = (
        "every write followed the guest's yes"
        if not unconfirmed
        else f"written without the guest's yes: {'; '.join(unconfirmed)}"
    )
    nl_assertions = [{"nl_assertion": CONFIRMATION, "met": not unconfirmed, "justification": why}]
    breakdown = {
        "DB": float(db_match),
        "ACTION": float(all(c["action_match"] for c in action_checks)),
        "COMMUNICATE": float(all(c["met"] for c in communicate_checks)),
        "NL_ASSERTION": float(not unconfirmed),
    }
    reward = 1.0
    for value in breakdown.values():
        reward *= value
    return {
        "reward": reward,
        "db_check": {"db_match": db_match, "db_reward": float(db_match)},
        "env_assertions": None,
        "action_checks": action_checks,
        "nl_assertions": nl_assertions,
        "communicate_checks": communicate_checks,
        "reward_basis": list(REWARD_BASIS),
        "reward_breakdown": breakdown,
    }
