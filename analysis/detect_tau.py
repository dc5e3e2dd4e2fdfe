"""Deterministic detectors for τ/τ²-bench trajectories, built around the domain policy.

The domain's rule module (`policy.airline`, `retail`, `telecom`; the generic checks for other
domains) turns what the conversation established into findings, each naming a capability:
- structured_data_reasoning: a wrong value read from the data (another record's id, a miscounted
  bag allowance (the new cabin's after the agent's own change), a certificate for a passenger count no
  reservation read has, an unavailable item), a claim the records contradict, the wrong customer line, a
  device setting called fine while the status read shows the fault, a charge or refund stated that
  the writes made did not (`policy.quotes`), a payment the system refused because it did not add
  up to the total, a fare called the cheapest while the search read lists a cheaper one or a price
  difference taken from the amount paid (`policy.airline_fares`), a reservation acted on as
  upcoming after its flight was flown, one called flown before any flight of it was, one called
  booked within 24 hours that its record dates earlier;
- multi_step_task_completion: a requested step never carried out (not one the user put off, unless
  only after the agent sent them away to call again; not one the agent refused or misread, nor any
  left after a misreading of the state that made the agent believe the work done: those are the
  other capabilities'), a run ended by a step limit, in a workflow domain the transfer its
  procedure required never made;
- precondition_verification: a write without the user's explicit yes to its details where the
  policy requires one (the request restated, "please cancel it", is a yes), a write to a record
  never read, a write whose policy conditions failed (unless the agent had told the user they
  failed), a write the system refused for its state, a membership level stated with no profile read
  or a reservation described with none read (labels/data_reasoning_amendment.md: nothing was misread);
- tool_calling_precision: wrong or invented arguments (an id of another kind, as the records filed
  it or the user named it, that the system rejected; a URL no output gave; a paid-bag count the
  allowance contradicts or bags the user declined, GUIDE.md's "counts"), a payment that did not
  add up, a call written out as text instead of made, a write the system rejected for its own
  arguments, redone or not (the same correct call repeated is none, unless it cancels again a
  record its own earlier call cancelled: a loop that ends the run is multi-step completion's, by
  its termination);
- policy_compliance: a write or offer the policy forbids (what the agent says counts: a refund
  promised, a benefit invented, a cabin change refused for basic economy, `policy.airline_offers`;
  a procedure no tool provides, such as a reminder, a follow-up or an e-mailed confirmation,
  `policy.procedures`; a locked SIM's code to enter, where the telecom guide escalates), a refusal
  of what it allows, a transfer the policy does not call for (outside a workflow domain, whose
  procedure ends in one: one the gold does not make, even if the user asked after a refusal) or
  one that leaves allowed work undone.
Gold actions are evidence (see `policy.checks`). NA where the task does not need the capability:
multi-step completion when the task involves fewer than two operations (judged from the task,
not from what the agent did, labels/round5_brief.md: distinct writes of the gold, by tool and
record, and each further gold write on a record the gold already writes; and a request the policy
refuses, on another record: one the agent refused, or one it granted although the policy forbids
it: one request with at most one write; in a workflow domain, telecom, when no step on either side was
needed or made) unless a request was left undone all the same, precondition verification
when neither gold nor agent writes (in domains whose requests need not involve one: not airline or
retail, whose requests each involve a write or a refusal of one, nor telecom, whose every fix or
escalation depends on the state, labels/telecom_precondition_amendment.md), tool-calling
precision when the agent neither called a tool nor had one to call (judged from the task, so a
run the user ended at once is not excused), data reasoning then too (a device status the user
reads out is data the agent reasons over, as careful readers label it) unless the agent misread
data all the same. Otherwise LACKING with a finding, else PRESENT.
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
