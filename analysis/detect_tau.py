"""Deterministic detectors for τ/τ²-bench trajectories, built on the benchmark's own verdicts.

Signals (contract.md keys): `diagnostics.reward_info.action_checks` (which gold actions the run
matched), `diagnostics.gold_actions`, `reward_info.communicate_checks`, the agent's tool calls
and their error flags, and `termination_reason`. A tool is a *read* when its name starts with a
lookup verb (get_, search_, list_, find_, check_, calculate, think), a *transfer* when it is
`transfer_to_human_agents`, and a *write* otherwise.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tracegym.analysis.detectors import CallRecord, Verdict, agent_calls, canonical, evidence, render_call
from tracegym.schema import Evidence, Trajectory

READ_PREFIXES = ("get_", "search_", "list_", "find_", "check_", "calculate", "think")
TRANSFER = "transfer_to_human_agents"
LOOPING_TERMINATIONS = {"max_steps", "too_many_errors", "timeout", "context_window_exceeded"}
REPEAT_LIMIT = 3  # identical calls (same name and arguments) counted as a loop from this many on


def tool_kind(name: str) -> str:
    """"read", "transfer" or "write" (see module docstring)."""
    if name == TRANSFER:
        return "transfer"
    return "read" if name.startswith(READ_PREFIXES) else "write"


def _gold(trajectory: Trajectory) -> list[dict[str, Any]]:
    actions = trajectory.diagnostics.get("gold_actions") or []
    return [a for a in actions if (a.get("requestor") or "assistant") == "assistant"]


def _matches(gold: dict[str, Any], arguments: dict[str, Any]) -> bool:
    keys = gold.get("compare_args")
    expected = gold.get("arguments") or {}
    keys = list(expected) if keys is None else keys
    return all(canonical(arguments.get(k)) == canonical(expected.get(k)) for k in keys)


def _gold_matched(trajectory: Trajectory, calls: list[CallRecord]) -> list[tuple[dict[str, Any], bool]]:
    """Each gold action and whether the run matched it: τ²'s action_checks when recorded, else ours."""
    reward_info = trajectory.diagnostics.get("reward_info") or {}
    checks = reward_info.get("action_checks")
    if checks:
        return [(c["action"], bool(c.get("action_match"))) for c in checks
                if (c["action"].get("requestor") or "assistant") == "assistant"]
    return [(g, any(r.call.name == g["name"] and _matches(g, r.call.arguments) for r in calls)) for g in _gold(trajectory)]


def _context_before(trajectory: Trajectory, index: int) -> str:
    """Text the agent had seen before message `index`: user messages and tool results."""
    return "\n".join(m.content for m in trajectory.messages[:index] if m.role in ("user", "tool"))


def _value_grounded(value: Any, context: str) -> bool:
    """Whether every scalar inside `value` appears verbatim in `context`."""
    if isinstance(value, dict):
        return all(_value_grounded(v, context) for v in value.values())
    if isinstance(value, list):
        return all(_value_grounded(v, context) for v in value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value) in context


def _argument_errors(trajectory: Trajectory, calls: list[CallRecord], missed: list[dict[str, Any]]):
    """Missed gold actions the agent called by name with other arguments, split by whether the
    wrong values came from the conversation (data misread) or from nowhere (imprecise call)."""
    grounded: list[Evidence] = []
    ungrounded: list[Evidence] = []
    for gold in missed:
        for record in calls:
            if record.call.name != gold["name"] or record.failed:
                continue
            expected = gold.get("arguments") or {}
            keys = gold.get("compare_args") or list(expected)
            wrong = {k: record.call.arguments.get(k) for k in keys
                     if canonical(record.call.arguments.get(k)) != canonical(expected.get(k))}
            if not wrong:
                continue
            text = f"{render_call(record.call)}; gold wants " + ", ".join(f"{k}={expected.get(k)!r}" for k in wrong)
            context = _context_before(trajectory, record.index)
            target = grounded if _value_grounded(wrong, context) else ungrounded
            target.append(evidence(record.index, text))
            break
    return grounded, ungrounded


def detect(trajectory: Trajectory) -> dict[str, Verdict]:
    """Verdicts for the five τ capabilities of the catalogue."""
    calls = agent_calls(trajectory)
    gold = _gold(trajectory)
    matched = _gold_matched(trajectory, calls)
    missed = [g for g, ok in matched if not ok]
    grounded, ungrounded = _argument_errors(trajectory, calls, missed)
    last = len(trajectory.messages) - 1
    return {
        "structured_data_reasoning": _data_reasoning(trajectory, gold, grounded),
        "multi_step_task_completion": _multi_step(trajectory, gold, calls, missed, last),
        "precondition_verification": _preconditions(gold, calls),
        "tool_calling_precision": _precision(trajectory, calls, ungrounded, last),
        "policy_compliance": _policy(gold, calls),
    }


def _data_reasoning(trajectory: Trajectory, gold: list[dict[str, Any]], grounded: list[Evidence]) -> Verdict:
    communicate = (trajectory.diagnostics.get("reward_info") or {}).get("communicate_checks") or []
    needed = bool(trajectory.diagnostics.get("communicate_info")) or any(g.get("arguments") for g in gold)
    if not needed:
        return Verdict.na()
    unmet = [evidence(None, f"required information not communicated: {c.get('info')}")
             for c in communicate if c.get("met") is False]
    found = grounded + unmet
    return Verdict.lacking(found) if found else Verdict.present()


def _multi_step(trajectory, gold, calls, missed, last) -> Verdict:
    if trajectory.termination_reason in LOOPING_TERMINATIONS:
        final = trajectory.messages[last].content if last >= 0 else ""
        return Verdict.lacking([evidence(last, f"terminated by {trajectory.termination_reason}: {final}")])
    steps = [g for g in gold if tool_kind(g["name"]) != "transfer"]
    if len(steps) < 2:
        return Verdict.na()
    attempted = {r.call.name for r in calls}
    never = [evidence(None, f"gold action never attempted: {g['name']}({g.get('arguments')})")
             for g in missed if g["name"] not in attempted and tool_kind(g["name"]) != "transfer"]
    return Verdict.lacking(never) if never else Verdict.present()


def _preconditions(gold, calls: list[CallRecord]) -> Verdict:
    writes = [r for r in calls if tool_kind(r.call.name) == "write" and not r.failed]
    gold_writes = {g["name"] for g in gold if tool_kind(g["name"]) == "write"}
    if not writes and not gold_writes:
        return Verdict.na()
    read_keys = {k for r in calls if tool_kind(r.call.name) == "read" for k in r.call.arguments}
    found: list[Evidence] = []
    for record in writes:
        seen = {canonical(v) for r in calls if r.index < record.index and tool_kind(r.call.name) == "read"
                for v in r.call.arguments.values()}
        unread = {k: v for k, v in record.call.arguments.items() if k in read_keys and canonical(v) not in seen}
        if unread:
            found.append(evidence(record.index, f"write without reading {unread} first: {render_call(record.call)}"))
        elif gold_writes and record.call.name not in gold_writes:
            found.append(evidence(record.index, f"write the task did not call for: {render_call(record.call)}"))
    return Verdict.lacking(found) if found else Verdict.present()


def _precision(trajectory, calls: list[CallRecord], ungrounded: list[Evidence], last: int) -> Verdict:
    if not calls:
        return Verdict.na()
    found = list(ungrounded)
    for record in calls:
        if record.failed:
            found.append(evidence(record.result_index, f"{render_call(record.call)} -> error: {record.result.content}"))
    counts = Counter((r.call.name, canonical(r.call.arguments)) for r in calls)
    for record in calls:
        key = (record.call.name, canonical(record.call.arguments))
        if counts[key] >= REPEAT_LIMIT:
            found.append(evidence(record.index, f"called {counts[key]} times identically: {render_call(record.call)}"))
            counts[key] = 0
    if trajectory.termination_reason == "too_many_errors":
        found.append(evidence(last, "terminated by too_many_errors"))
    return Verdict.lacking(found) if found else Verdict.present()


def _policy(gold, calls: list[CallRecord]) -> Verdict:
    gold_kinds = {tool_kind(g["name"]) for g in gold}
    found: list[Evidence] = []
    transfers = [r for r in calls if tool_kind(r.call.name) == "transfer"]
    if transfers and "transfer" not in gold_kinds:
        found.append(evidence(transfers[0].index, f"unwarranted transfer: {render_call(transfers[0].call)}"))
    if "transfer" in gold_kinds and not transfers:
        found.append(evidence(None, "the policy required a transfer to a human agent; none was made"))
    if "write" not in gold_kinds:
        for record in calls:
            if tool_kind(record.call.name) == "write" and not record.failed:
                found.append(evidence(record.index, f"performed a write the policy forbids here: {render_call(record.call)}"))
                break
    return Verdict.lacking(found) if found else Verdict.present()
