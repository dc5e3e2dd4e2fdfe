"""Failure-source attribution: agent, user simulator, or benchmark.

Deterministic signals establish only a few causes, each stated with its evidence:
- benchmark: the run has no grade (reward None: infrastructure error), or the task's gold
  actions were corrected in a later task-set version (`contrast.gold_changes`) and the failure
  involves the correction (a stale gold action went unmatched, or the agent made a call only the
  corrected gold expects); other failures on such tasks stay with the agent;
- user simulator: the run ended with `user_error`, or the simulated user sent its stop token
  while the agent's last message was an open question and a gold write action was still
  unmatched (the user left before the agent could finish; a heuristic, since the agent may have
  asked a needless question).
Everything else defaults to the agent. An LLM judge (judge.attribute_failures) can refine the
default with quoted evidence, e.g. a user simulator inventing details or a gold action that the
policy forbids; deterministic benchmark and user signals take precedence over the judge.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from tracegym.analysis.contrast import GoldChange, task_key
from tracegym.analysis.detect_tau import tool_kind
from tracegym.analysis.detectors import agent_calls, canonical, evidence, render_call
from tracegym.schema import Evidence, Trajectory

Source = Literal["agent", "user_simulator", "benchmark"]
USER_STOP_TOKENS = ("###STOP###",)


class FailureSource(BaseModel):
    """Who caused one failure, why, the evidence, and which method decided it."""

    trajectory_id: str
    source: Source
    reason: str
    evidence: Evidence | None = None
    method: Literal["deterministic", "judge", "default"] = "default"


def _user_left_early(trajectory: Trajectory) -> Evidence | None:
    messages = trajectory.messages
    if trajectory.termination_reason != "user_stop" or not messages:
        return None
    user = [i for i, m in enumerate(messages) if m.role == "user"]
    spoken = [i for i, m in enumerate(messages) if m.role == "assistant" and m.content.strip()]
    if not user or not spoken or spoken[-1] > user[-1]:
        return None
    if not any(token in messages[user[-1]].content for token in USER_STOP_TOKENS):
        return None
    if not messages[spoken[-1]].content.strip().endswith("?"):
        return None
    checks = (trajectory.diagnostics.get("reward_info") or {}).get("action_checks") or []
    unmet = [c["action"]["name"] for c in checks if not c.get("action_match") and tool_kind(c["action"]["name"]) == "write"]
    if not unmet:
        return None
    return evidence(user[-1], f"user stopped after the agent asked: {messages[spoken[-1]].content[-120:]} "
                              f"/ user: {messages[user[-1]].content} (unmet: {', '.join(unmet)})")


def _explained_by_gold_change(trajectory: Trajectory, change: GoldChange | None) -> Evidence | None:
    """Evidence that a failure comes from corrected gold: a stale gold action went unmatched, or the
    agent made a call the corrected gold expects. Without a reference file every failure of a
    listed task counts as possibly explained."""
    if change is None:
        return None
    if change.stale is None:
        return evidence(None, change.reason)
    checks = (trajectory.diagnostics.get("reward_info") or {}).get("action_checks") or []
    stale_keys = {canonical([a.get("name"), a.get("arguments") or {}]) for a in change.stale}
    for check in checks:
        action = check["action"]
        if not check.get("action_match") and canonical([action.get("name"), action.get("arguments") or {}]) in stale_keys:
            return evidence(None, f"unmatched gold action {action.get('name')}({action.get('arguments')}) was "
                                  "changed or removed in the corrected task set")
    for record in agent_calls(trajectory):
        for action in change.added:
            if record.call.name == action.get("name") and canonical(record.call.arguments) == canonical(action.get("arguments") or {}):
                return evidence(record.index, f"agent did what the corrected gold expects: {render_call(record.call)}")
    return None


def attribute_deterministic(trajectories: list[Trajectory], gold_changed: dict[str, GoldChange]) -> dict[str, FailureSource]:
    """A FailureSource for every failed trajectory (successes are not listed)."""
    sources: dict[str, FailureSource] = {}
    for trajectory in trajectories:
        if trajectory.success:
            continue
        last = len(trajectory.messages) - 1 if trajectory.messages else None
        if trajectory.reward is None:
            found = FailureSource(trajectory_id=trajectory.id, source="benchmark", method="deterministic",
                                  reason=f"not graded (termination {trajectory.termination_reason})")
        elif (stale := _explained_by_gold_change(trajectory, gold_changed.get(task_key(trajectory)))) is not None:
            found = FailureSource(trajectory_id=trajectory.id, source="benchmark", method="deterministic",
                                  reason=gold_changed[task_key(trajectory)].reason, evidence=stale)
        elif trajectory.termination_reason == "user_error":
            found = FailureSource(trajectory_id=trajectory.id, source="user_simulator", method="deterministic",
                                  reason="terminated by user_error", evidence=evidence(last, "user_error"))
        elif (left := _user_left_early(trajectory)) is not None:
            found = FailureSource(trajectory_id=trajectory.id, source="user_simulator", method="deterministic",
                                  reason="user stopped while the agent awaited an answer", evidence=left)
        else:
            found = FailureSource(trajectory_id=trajectory.id, source="agent", reason="no other cause established")
        sources[trajectory.id] = found
    return sources


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
