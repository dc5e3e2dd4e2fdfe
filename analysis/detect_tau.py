"""Deterministic detectors for τ/τ²-bench trajectories, built on the domain's executable policy.

`detect(trajectory)` gives one `Verdict` for each capability of `CAPABILITIES`: LACKING with the
findings as evidence when a check names the capability and the task needs it (or a finding shows
it was needed), NA when the task does not need it, else PRESENT. `findings` runs the shared checks
(`rules.checks`, `rules.quotes`, `rules.payments`) and the domain's rule module (`rules.airline`,
`retail`, `telecom`; `rules.domain.GENERIC` for other domains) over one conversation.

The rulings the checks follow, by capability and by domain, and when each capability is NA, are
in docs/detectors.md.
"""

from __future__ import annotations

from tracegym.analysis.detectors import Verdict, evidence
from tracegym.analysis.rules import checks, domain_for, payments, quotes
from tracegym.analysis.rules.conversation import Conversation
from tracegym.analysis.rules.domain import TRANSFER, Domain, Finding
from tracegym.schema import Trajectory

CAPABILITIES = (
    "structured_data_reasoning",
    "multi_step_task_completion",
    "precondition_verification",
    "tool_calling_precision",
    "policy_compliance",
)


def findings(conversation: Conversation, domain: Domain) -> list[Finding]:
    """Every finding of every check on one conversation, in check order."""
    said = list(domain.check_conversation(conversation))
    every_gap = checks.gold_gaps(conversation, domain)
    misled = any(f.misled for f in said)  # the steps left undone are owed to the misreading, not dropped
    gaps = [g for g in every_gap if not (misled and g.kind == "not_done")]
    left_early = checks.user_left_early(conversation) is not None
    found = [
        f
        for g in gaps
        if g.blames_agent and not (left_early and g.kind in ("not_done", "refused"))
        for f in (g.finding, g.also)
        if f is not None
    ]
    for check in (
        checks.unconfirmed_writes,
        checks.unread_records,
        checks.policy_writes,
        checks.writes_gold_refuses,
        checks.invented_identifiers,
        checks.miscomputed_payments,
    ):
        found += check(conversation, domain)
    found += checks.failed_writes(conversation, domain, gaps)
    found += checks.transfers(conversation, domain, every_gap)  # a transfer before those steps is still early
    found += checks.termination(conversation)
    found += checks.calls_written_as_text(conversation)
    found += checks.repeated_cancellations(conversation, domain)
    found += checks.misplaced_identifiers(conversation)
    found += quotes.misquoted_charges(conversation, domain)
    found += payments.unheld_methods(conversation)
    return found + said


def _operations(conversation: Conversation, domain: Domain) -> int:
    """How many operations a task involves: one per tool and record among the gold's own writes
    (agent side) and the writes the agent attempted that the policy forbids (a request the policy
    refuses is still one the user made; an agent's other writes, a retry or a record chosen wrongly,
    are what it did, not what the task asks), plus each further gold write on a tool and record the
    gold already writes (an upgrade, then a flight change, of one reservation: gold never retries),
    plus one for a request on another record the agent refused under the policy (a cancellation
    refused, then a booking made: two requests)."""
    gold = [
        (a["name"], checks.record_of(domain, a["arguments"]))
        for a in conversation.gold
        if (a.get("requestor") or "assistant") == "assistant"
        and a.get("name") != TRANSFER
        and domain.is_write(a.get("name", ""))
    ]
    forbidden = {
        (c.name, checks.record_of(domain, c.arguments))
        for c in conversation.agent_calls
        if domain.is_write(c.name)
        and any(
            f.capability == "policy_compliance" for f in domain.check_action(conversation, c.name, c.arguments, c.index)
        )
    }
    written = {value for _, record in set(gold) | forbidden for _, value in record}
    refused = any(record not in written for record in checks.refused_records(conversation, domain))
    return len(set(gold) | forbidden) + len(gold) - len(set(gold)) + int(refused)


def _needed(conversation: Conversation, domain: Domain) -> dict[str, bool]:
    gold = conversation.gold
    gold_writes = [
        a
        for a in gold
        if a.get("name") != TRANSFER
        and (domain.is_write(a.get("name", "")) or (a.get("requestor") or "assistant") != "assistant")
    ]
    agent_writes = [c for c in conversation.agent_calls if domain.is_write(c.name) and not c.error]
    agents_work = any((a.get("requestor") or "assistant") == "assistant" for a in gold)
    called = bool(conversation.agent_calls) or agents_work
    return {
        "structured_data_reasoning": called,
        "multi_step_task_completion": bool(gold_writes or agent_writes)
        if domain.workflow
        else _operations(conversation, domain) >= 2,
        "precondition_verification": domain.preconditions_always
        or bool(agent_writes)
        or any((a.get("requestor") or "assistant") == "assistant" for a in gold_writes),
        "tool_calling_precision": called,
        "policy_compliance": True,
    }


def detect(trajectory: Trajectory) -> dict[str, Verdict]:
    """Verdicts for the five τ capabilities of the catalogue."""
    conversation = Conversation(trajectory)
    domain = domain_for(trajectory)
    found = findings(conversation, domain)
    needed = _needed(conversation, domain)
    verdicts = {}
    for name in CAPABILITIES:
        mine = [evidence(f.index, f.text) for f in found if f.capability == name]
        shown = any(f.shows_need for f in found if f.capability == name) or (
            bool(mine) and name == "structured_data_reasoning"
        )  # a misread shows even where none was needed
        verdicts[name] = (
            Verdict.lacking(mine)
            if shown
            else Verdict.na()
            if not needed[name]
            else (Verdict.lacking(mine) if mine else Verdict.present())
        )
    return verdicts
