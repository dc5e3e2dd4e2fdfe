"""What the two SWE-bench run layouts share: the harness report and the trajectory record.

The SWE-bench harness grades one instance into `{patch_exists, patch_successfully_applied,
resolved, tests_status{FAIL_TO_PASS{success, failure}, PASS_TO_PASS{...}, ...}}`; both
mini-swe-agent (`logs/<id>/report.json`) and OpenHands (a `report: {...}` line in the eval log)
keep that dict, sometimes keyed by the instance id.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from tracegym.analysis.ingest.common import validate
from tracegym.schema import Message, Source, Trajectory

BENCHMARK = "swe-bench"
_TEST_GROUPS = ("FAIL_TO_PASS", "PASS_TO_PASS")
_PR_DESCRIPTION = re.compile(
    r"<pr_description>\s*(?:Consider the following PR description:\s*)?(.*?)\s*</pr_description>", re.DOTALL
)


class _TestGroup(BaseModel):
    success: list[str] = []
    failure: list[str] = []


class HarnessReport(BaseModel):
    """The harness verdict for one instance (unknown fields ignored)."""

    resolved: bool
    patch_exists: bool | None = None
    patch_successfully_applied: bool | None = None
    tests_status: dict[str, _TestGroup] = {}


def harness_report(raw: Any, instance_id: str, where: str) -> HarnessReport:
    """Validate a harness report, unwrapping `{instance_id: {...}}` when the file is keyed by id."""
    if isinstance(raw, dict) and isinstance(raw.get(instance_id), dict):
        raw, where = raw[instance_id], f"{where}.{instance_id}" if where else instance_id
    return validate(HarnessReport, raw, where)


def problem_statement(messages: list[Message]) -> str:
    """The task text: the `<pr_description>` of the first user message, else that whole message."""
    for message in messages:
        if message.role == "user":
            match = _PR_DESCRIPTION.search(message.content)
            return match.group(1) if match else message.content
    return ""


def swe_trajectory(
    run: str,
    instance_id: str,
    source: Source,
    messages: list[Message],
    resolved: bool,
    patch: str | None,
    report: HarnessReport | None,
    exit_status: str | None,
    patch_source: str = "",
) -> Trajectory:
    """One instance as a Trajectory with the diagnostics the contract names (reward 1.0 iff resolved).

    `patch` is the submitted diff ("" for a record of an empty one) or None when the run holds no
    record of it (unknown, never taken as empty); `patch_source` says which record it came from.
    """
    tests = {}
    if report is not None and report.tests_status:
        tests = {group: report.tests_status.get(group, _TestGroup()).model_dump() for group in _TEST_GROUPS}
    return Trajectory.model_construct(
        id=f"{run}/{instance_id}",
        task_id=instance_id,
        trial=0,
        source=source,
        messages=messages,
        reward=1.0 if resolved else 0.0,
        success=resolved,
        termination_reason=exit_status,
        diagnostics={
            "resolved": resolved,
            "patch": patch,
            "patch_source": patch_source if patch is not None else "",
            "patch_exists": report.patch_exists
            if report is not None and report.patch_exists is not None
            else (None if patch is None else bool(patch.strip())),
            "patch_successfully_applied": None if report is None else report.patch_successfully_applied,
            "tests_status": tests,
            "exit_status": exit_status,
        },
        metadata={"problem_statement": problem_statement(messages)},
    )
