"""The built-in catalogue of general agent capabilities the detectors and the judge label.

Names are snake_case and general (docs/method.md, "Capability selection": a domain rule such as
"flight_rebooking_procedure" is not a capability). `benchmarks` says which benchmark families a
capability's deterministic detector covers ("tau" for τ/τ²-bench, "swe" for SWE-bench); the LLM
judge may label any of them on any benchmark. A capability with no benchmark listed has no
detector yet (`catalogue_for` leaves it out); it is in the catalogue because it is a general agent
capability that an environment family trains (tracegym.synth_envs.registry.CAPABILITY_TABLE).
"""

from __future__ import annotations

from tracegym.schema import Capability

CATALOGUE: tuple[Capability, ...] = (
    Capability(
        name="structured_data_reasoning",
        description=(
            "Reading structured tool results (records, prices, dates, lists) and deriving the right "
            "values from them: picking the correct record, computing totals, comparing fields. "
            "Shown when the arguments of the agent's actions and the figures it tells the user "
            "match what the data implies."
        ),
        benchmarks=["tau"],
    ),
    Capability(
        name="multi_step_task_completion",
        description=(
            "Carrying a request that needs several dependent operations through to the end: every "
            "required action is attempted, none is forgotten after a topic change, and the "
            "conversation ends neither prematurely nor in a loop."
        ),
        benchmarks=["tau"],
    ),
    Capability(
        name="precondition_verification",
        description=(
            "Checking state before changing it: reading the reservation, user or order a write "
            "affects, and confirming the policy's conditions hold, before performing the write. "
            "Lacking when the agent writes to something it never looked at, or performs a write the "
            "task did not call for."
        ),
        benchmarks=["tau"],
    ),
    Capability(
        name="tool_calling_precision",
        description=(
            "Calling tools with exactly the right names, argument types, formats and identifiers, so "
            "that calls succeed the first time. Lacking when a call names a wrong or non-existent tool, "
            "or carries a malformed, invented or mismatched argument (an id, date, amount or count that "
            "neither the user nor a tool output supports); not when the same correct call is repeated "
            "or a value is the one the user dictated."
        ),
        benchmarks=["tau"],
    ),
    Capability(
        name="policy_compliance",
        description=(
            "Following the domain policy under user pressure: refusing what the policy forbids "
            "instead of performing it, and transferring to a human agent only when the policy calls "
            "for it rather than to avoid work."
        ),
        benchmarks=["tau"],
    ),
    Capability(
        name="patch_production",
        description=(
            "Ending a repair session with a non-empty patch that applies cleanly to the repository. "
            "Lacking when the agent runs out of steps, submits nothing, or submits a diff the "
            "harness cannot apply."
        ),
        benchmarks=["swe"],
    ),
    Capability(
        name="issue_reproduction",
        description=(
            "Reproducing the reported behaviour before changing code: running a script or the relevant "
            "tests that show the failure, so the fix targets an observed problem rather than a guess."
        ),
        benchmarks=["swe"],
    ),
    Capability(
        name="test_verification",
        description=(
            "Running the relevant tests or a reproduction script after the last edit and before "
            "submitting, so the patch is checked against behaviour rather than assumed correct."
        ),
        benchmarks=["swe"],
    ),
    Capability(
        name="fault_localisation",
        description=(
            "Finding where the defect lives: the patch changes the source the issue's tests exercise "
            "(the files of the reference fix, when known) rather than working around the bug elsewhere."
        ),
        benchmarks=["swe"],
    ),
    Capability(
        name="edit_scope",
        description=(
            "Keeping the patch to the change the issue needs: no reproduction or debug scripts, scratch "
            "output files or build-configuration edits left in the submitted diff."
        ),
        benchmarks=["swe"],
    ),
    Capability(
        name="error_recovery",
        description=(
            "Recovering when a tool call fails: retrying transient errors, doing what the error "
            "message asks (wait, re-authenticate, use the identifier it names) and carrying on with "
            "the task. Lacking when the agent gives up, repeats the failing call unchanged, or reports "
            "results it never obtained."
        ),
    ),
    Capability(
        name="causal_diagnosis",
        description=(
            "Finding why a metric changed by exploring the data: comparing time windows and "
            "segments, ruling out confounders, and attributing the change to the right cause and the "
            "right slice. Lacking when the agent names a cause the data does not support."
        ),
    ),
)


def benchmark_family(benchmark: str) -> str:
    """ "swe" for SWE-bench trajectories, "tau" for τ/τ²-bench ones, else the benchmark name."""
    if benchmark.startswith("swe"):
        return "swe"
    if benchmark.startswith("tau"):
        return "tau"
    return benchmark


def catalogue_for(benchmarks: set[str]) -> list[Capability]:
    """The catalogue entries whose detectors cover any of `benchmarks` (benchmark names)."""
    families = {benchmark_family(b) for b in benchmarks}
    return [c for c in CATALOGUE if families.intersection(c.benchmarks)]
