"""Failure-source attribution: agent, user simulator, or benchmark, from the run itself.

Only the run itself is read (its own gold actions, tool results and messages) and the table of
the benchmark's own gold corrections that ships with the package, keyed by action content; no task
file is looked up beside the inputs, so a run gets the same attribution whatever else is
diagnosed with it. In order:
- benchmark: the run has no grade (reward None: an infrastructure error); or a gold action the
  run missed breaks the run's own domain policy given what the run's tool results showed (a
  cancellation the policy forbids, a baggage fee against the allowance, a refund to a method the
  policy excludes, a date of birth the profile contradicts), or is one the benchmark corrected in
  a later task set, or the agent did what the corrected set expects (`policy.corrections`, keyed
  by the action's content, so a run graded on the corrected set is not blamed); the gold was
  checked, not trusted. A wrong or corrected gold action blames the benchmark only where the agent
  made no error of its own other than policy compliance (misread data, an imprecise call, an
  unverified write, a dropped step: then it did not behave correctly either, and the readers'
  "benchmark" is an agent that behaved correctly under the policy); one that breaks the policy
  outranks the user simulator's early stop below (the run could not have passed anyway); a merely
  corrected one does not;
- user simulator: the run ended with `user_error`; or the simulated user's stop token ended the
  run before the agent could act (as its first words, with a yes to the agent's proposal, or
  alone while the agent awaited an answer; a closing "anything else?" awaits none, and a stop
  answering a human transfer the agent offered after giving up work the gold asks of it cuts
  nothing); or every difference between the agent's writes and the gold is a value the user
  dictated first (the agent did what the user asked; the user left its instructions). A gold write
  the system refused for its record's state when the agent made it could not have changed the
  database: it blames nobody.
A write of the agent's own that the policy forbids (and the system carried out) is the agent's
failure before any of these: no gold could have passed the run after it. Everything else
defaults to the agent. An LLM judge (judge.attribute_failures) can refine the
default with quoted evidence; deterministic attributions take precedence over the judge.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from tracegym.analysis import detect_tau
from tracegym.analysis.catalogue import benchmark_family
from tracegym.analysis.detectors import evidence, render
from tracegym.analysis.rules import checks, corrections, domain_for
from tracegym.analysis.rules.conversation import Conversation
from tracegym.analysis.rules.domain import TRANSFER, Domain, Finding
from tracegym.schema import Evidence, Trajectory

Source = Literal["agent", "user_simulator", "benchmark"]


class FailureSource(BaseModel):
    """Who caused one failure, why, the evidence, and which method decided it."""

    trajectory_id: str
    source: Source
    reason: str
    evidence: Evidence | None = None
    method: Literal["deterministic", "judge", "default"] = "default"


def _deterministic(trajectory_id: str, source: Source, reason: str, found: Evidence | None) -> FailureSource:
    return FailureSource(
        trajectory_id=trajectory_id, source=source, reason=reason, evidence=found, method="deterministic"
    )


def _gold_at_fault(trajectory_id: str, reason: str, gap: checks.Gap) -> FailureSource:
    """The benchmark's failure, with what is wrong with the gold action first."""
    action = gap.action
    return _deterministic(
        trajectory_id,
        "benchmark",
        reason,
        evidence(None, f"{gap.finding.text}; gold {render(action.get('name', ''), action.get('arguments') or {})}"),
    )


def _own_errors(conversation: Conversation, domain: Domain) -> list[Finding]:
    """The agent's own errors other than policy compliance (whose rule may be the one the gold gets
    wrong): misread data, imprecise calls, unverified writes, steps dropped. An agent that made them
    did not behave correctly, so a wrong gold does not make the failure the benchmark's."""
    return [f for f in detect_tau.findings(conversation, domain) if f.capability != "policy_compliance"]


_TRANSFER_OFFER = re.compile(
    r"\btransfer\w*\b[^.?!\n]{0,40}\b(?:human|agent|representative|specialist|support)\b", re.IGNORECASE
)


def _handed_off(conversation: Conversation, gaps: list[checks.Gap], stop: int) -> bool:
    """Whether the agent message the user's stop (at `stop`) answered offered a transfer to a human
    while work the gold asks of the agent (a write, not the transfer) was left undone or refused:
    the agent had given the request up, so the stop that accepted its offer cut nothing it would
    have done, and the failure is not the user simulator's."""
    said = conversation.texts("assistant", 0, stop)
    offered = bool(said) and _TRANSFER_OFFER.search(said[-1][1]) is not None
    return offered and any(g.kind in ("not_done", "refused") and g.action.get("name") != TRANSFER for g in gaps)


def attribute(trajectory: Trajectory) -> FailureSource:
    """The source of one failed trajectory's failure."""
    tid, last = trajectory.id, len(trajectory.messages) - 1 if trajectory.messages else None
    if trajectory.reward is None:
        return _deterministic(tid, "benchmark", f"not graded (termination {trajectory.termination_reason})", None)
    if trajectory.termination_reason == "user_error":
        return _deterministic(tid, "user_simulator", "terminated by user_error", evidence(last, "user_error"))
    if benchmark_family(trajectory.source.benchmark) != "tau":
        return FailureSource(trajectory_id=tid, source="agent", reason="no other cause established")
    conversation, domain = Conversation(trajectory), domain_for(trajectory)
    gaps = checks.gold_gaps(conversation, domain)
    if own := checks.breaking_writes(conversation, domain):  # no gold could have passed the run after such a write
        return FailureSource(
            trajectory_id=tid,
            source="agent",
            reason="the agent made a write the policy forbids",
            evidence=evidence(own[0].index, own[0].text),
        )
    broken = [g for g in gaps if g.kind == "breaks_policy"]
    if broken and not _own_errors(conversation, domain):
        return _gold_at_fault(tid, "gold action breaks the policy", broken[0])
    if (left := checks.user_left_early(conversation)) is not None and not _handed_off(conversation, gaps, left.index):
        return _deterministic(
            tid,
            "user_simulator",
            "the user simulator stopped before the agent could act",
            evidence(left.index, left.text),
        )
    corrected = [g for g in gaps if g.kind == "corrected_gold"]
    if corrected and not _own_errors(conversation, domain):
        return _gold_at_fault(tid, "gold action corrected by the benchmark", corrected[0])
    domain_name = str(trajectory.metadata.get("domain") or "")
    right = [
        c
        for c in conversation.agent_calls
        if corrections.corrected_expects(domain_name, trajectory.task_id, c.name, c.arguments)
    ]
    if right:
        return _deterministic(
            tid,
            "benchmark",
            "gold action corrected by the benchmark",
            evidence(
                right[0].index,
                f"the agent did what the corrected task set expects: {render(right[0].name, right[0].arguments)}",
            ),
        )
    effective = [g for g in gaps if g.kind != "no_effect"]  # a write the system refused changed nothing
    if effective and all(g.kind == "followed_user" for g in effective):
        action = effective[0].action
        return _deterministic(
            tid,
            "user_simulator",
            "the agent did what the user asked, which differs from the gold",
            evidence(
                None,
                "the agent's values that differ from the gold were the user's own words; "
                f"gold {render(action.get('name', ''), action.get('arguments') or {})}",
            ),
        )
    return FailureSource(trajectory_id=tid, source="agent", reason="no other cause established")


def attribute_deterministic(trajectories: list[Trajectory]) -> dict[str, FailureSource]:
    """A FailureSource for every failed trajectory (successes are not listed)."""
    return {t.id: attribute(t) for t in trajectories if not t.success}


def merge_judged(deterministic: dict[str, FailureSource], judged: dict[str, FailureSource]) -> dict[str, FailureSource]:
    """Judge verdicts replace only the default (agent, undetermined) attributions."""
    merged = dict(deterministic)
    for trajectory_id, verdict in judged.items():
        if trajectory_id in merged and merged[trajectory_id].method == "default":
            merged[trajectory_id] = verdict
    return merged


def split(sources: dict[str, FailureSource]) -> dict[str, int]:
    """Failure counts per source."""
    counts = {"agent": 0, "user_simulator": 0, "benchmark": 0}
    for found in sources.values():
        counts[found.source] += 1
    return counts
