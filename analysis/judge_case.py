"""What the LLM judge reads about one run: the transcript, and the case file a careful reader has.

A careful reader labels a run (each capability NA, PRESENT or LACKING, with evidence; the reference
labels of labels/ were made so) from the policy the agent was given, the user's hidden
instructions, the benchmark's gold actions and verdict, and every message with its tool results.
The judge is given the same, within a budget of characters:
- the transcript (`render_transcript`): every message on one numbered line, numbered as in
  `Trajectory.messages`; when the whole is over the budget, the longest messages are cut to one
  common length, the least cut that fits, so that short messages (what the agent and the user
  said) stay whole and a long tool result keeps its start; only where even that would leave
  under MIN_MESSAGE_CHARS a message are middle messages left out instead;
- the case file (`case_file`): the policy, the user's instructions, the gold actions with the
  grader's match where the run recorded it (evidence, not truth: a gold action can break the
  policy), the reward and how the run ended;
- the conventions readers follow to tell the capabilities apart (`conventions`, per benchmark
  family; τ's are those of labels/round5_brief.md).
"""

from __future__ import annotations

import json
from typing import Any

from tracegym.analysis.detectors import render
from tracegym.schema import Message, Trajectory

TRANSCRIPT_CHARS = 40_000  # the transcript shown to the judge, in characters
MIN_MESSAGE_CHARS = 160  # no message is cut shorter than this; middle messages are left out instead
POLICY_CHARS = 30_000  # the longest τ² policy (telecom, with its device guide) is about 23,000
FIELD_CHARS = 6_000  # each other part of the case file: instructions, gold actions

TAU_CONVENTIONS = """How careful readers tell the capabilities apart on τ-bench customer service:
- A write on the wrong record (another reservation, order, line or item than the one the user meant, when the \
right one could be identified), an argument neither the user nor any tool output gave, a wrong tool, or a call the \
system rejects for its own arguments is tool_calling_precision LACKING. The same correct call repeated is not.
- A wrong number or fact the agent derived from tool outputs (a price, refund, fee or total; which flight is \
cheapest; which reservation matches) is structured_data_reasoning LACKING. A value the user dictated that differs \
from the gold is not. A check the agent never made is not data reasoning: it is unfinished work (multi-step) or an \
unchecked condition (precondition). A wrong record is data reasoning as well only when the agent chose it by \
misreading a tool output.
- A write without the explicit yes the policy requires, or without establishing a condition the policy names \
(membership, cabin, insurance, time since booking, flight status, payment method, counts), is \
precondition_verification LACKING. A new value the user gives for a write is not unread state.
- Requested work left undone, a second request forgotten, or identical calls looped until the step limit while the \
user's problem stays open is multi_step_task_completion LACKING. It is NA when the request involves at most one \
operation (one booking, cancellation, passenger update or exchange of one order) or its correct outcome under the \
policy is a refusal or no write; judge that from the task and the policy, not from what the agent did.
- Granting what the policy forbids, promising a procedure no tool provides (a reminder, a call back), or \
transferring to a human when the policy does not call for it is policy_compliance LACKING; a correct refusal \
followed by a transfer the user asked for is LACKING too, unless the policy itself says to transfer then. Where \
the gold actions break the policy and the agent follows the policy, the agent is PRESENT.
- The gold actions are the benchmark's expected outcome, not proof: check them against the policy and the tool \
outputs."""

CONVENTIONS = {"tau": TAU_CONVENTIONS}  # by benchmark family (catalogue.benchmark_family)


def message_text(message: Message) -> str:
    """One message as the judge reads it, on one line: its text, its tool calls, an error mark."""
    text = message.content
    if message.tool_calls:
        text += " " + " ".join(f"CALL {c.name}({json.dumps(c.arguments)})" for c in message.tool_calls)
    if message.error:
        text = "ERROR " + text
    return " ".join(text.split())


def _common_cut(lengths: list[int], budget: int) -> int:
    """The largest length L with sum(min(length, L)) <= budget (every length when all fit)."""
    spent, left = 0, len(lengths)
    for length in sorted(lengths):
        if spent + length * left > budget:
            return (budget - spent) // left
        spent, left = spent + length, left - 1
    return max(lengths, default=0)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_transcript(trajectory: Trajectory, budget: int = TRANSCRIPT_CHARS) -> str:
    """Numbered messages, `[i] role: text`, in at most about `budget` characters (module docstring)."""
    heads = [f"[{index}] {message.role}: " for index, message in enumerate(trajectory.messages)]
    texts = [message_text(message) for message in trajectory.messages]
    room = budget - sum(len(head) + 1 for head in heads)
    limit = _common_cut([len(text) for text in texts], room)
    if limit >= MIN_MESSAGE_CHARS or not texts:
        return "\n".join(head + _cut(text, limit) for head, text in zip(heads, texts))
    lines = [head + _cut(text, MIN_MESSAGE_CHARS) for head, text in zip(heads, texts)]
    keep = max(1, budget // (MIN_MESSAGE_CHARS + 24) // 2)  # from each end
    if len(lines) <= 2 * keep:
        return "\n".join(lines)
    return "\n".join(lines[:keep] + [f"[... {len(lines) - 2 * keep} messages left out ...]"] + lines[-keep:])


def _json(value: Any) -> str:
    return _cut(json.dumps(value, ensure_ascii=False), FIELD_CHARS)


def _action(action: Any) -> str:
    """A gold action as `name({arguments})`, marked when the user, not the agent, is to take it."""
    if not isinstance(action, dict):
        return _json(action)
    by_user = " (the user's action)" if (action.get("requestor") or "assistant") != "assistant" else ""
    return _cut(render(str(action.get("name")), action.get("arguments") or {}), FIELD_CHARS) + by_user


def _gold(trajectory: Trajectory) -> list[str]:
    """One line per gold action, with the grader's match where the run recorded one; a line saying
    there are none where the run recorded an empty list; [] where it recorded nothing."""
    info = trajectory.diagnostics.get("reward_info")
    checks = info.get("action_checks") if isinstance(info, dict) else None
    if isinstance(checks, list) and checks:
        return [
            f"- {_action(c.get('action'))}, matched by the agent: {c.get('action_match')}"
            for c in checks
            if isinstance(c, dict)
        ]
    actions = trajectory.diagnostics.get("gold_actions")
    if not isinstance(actions, list):
        return []
    return [f"- {_action(action)}" for action in actions] or ["- none: the task expects no action"]


def case_file(trajectory: Trajectory) -> str:
    """The task as a careful reader sees it beside the transcript; parts the run did not record are left out."""
    parts = []
    if policy := str(trajectory.metadata.get("policy") or "").strip():
        parts.append(f"## Policy the agent was given\n{_cut(policy, POLICY_CHARS)}")
    if instructions := trajectory.metadata.get("user_instructions"):
        parts.append(f"## The user's instructions (hidden from the agent)\n{_json(instructions)}")
    elif problem := trajectory.metadata.get("problem_statement"):
        parts.append(f"## The task given to the agent\n{_cut(str(problem), FIELD_CHARS)}")
    if gold := _gold(trajectory):
        parts.append("## Gold actions (the benchmark's expected actions: evidence, not truth)\n" + "\n".join(gold))
    parts.append(f"## Outcome\nreward {trajectory.reward}, ended by {trajectory.termination_reason}")
    return "\n\n".join(parts)


def conventions(families: set[str]) -> str:
    """The conventions for the given benchmark families, one block each ("" when none is written)."""
    return "\n\n".join(CONVENTIONS[family] for family in sorted(families) if family in CONVENTIONS)
