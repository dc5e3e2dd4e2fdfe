"""Ingest all of ../shared/data: every run file ingests and its counts match the INDEX.json files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tracegym.analysis.ingest import IngestResult, SourceSummary, ingest_paths
from tracegym.schema import from_dataset, read_jsonl, to_dataset, write_jsonl

DATA = Path(os.environ.get("TRACEGYM_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
pytestmark = pytest.mark.skipif(
    not (DATA / "tau2" / "INDEX.json").is_file(), reason=f"real runs not found at {DATA} (set TRACEGYM_SHARED_DATA)"
)
MISLABELLED = "gpt-4.1-mini-2025-04-14__llm_agent__50sims_1trial.json"


@pytest.fixture(scope="module")
def result() -> IngestResult:
    return ingest_paths([DATA])


def _source(result: IngestResult, suffix: str) -> SourceSummary:
    matches = [s for s in result.sources if s.path.endswith(suffix)]
    assert len(matches) == 1, f"{suffix}: {len(matches)} sources"
    return matches[0]


def test_every_tau2_run_file_ingests_with_index_counts(result: IngestResult) -> None:
    index = json.loads((DATA / "tau2" / "INDEX.json").read_text())
    assert result.skipped == []
    files = sorted(str(p) for p in (DATA / "tau2" / "results").glob("*/*.json"))
    assert sorted(s.path for s in result.sources if s.format == "tau2_results") == files
    assert len(index["runs"]) == len(files)
    for run in index["runs"]:
        source = _source(result, run["file"])
        assert (source.runs, source.successes, source.failures) == (
            run["n_simulations"],
            run["n_success"],
            run["n_fail"],
        ), run["file"]


def test_swebench_runs_match_index(result: IngestResult) -> None:
    index = json.loads((DATA / "swebench" / "INDEX.json").read_text())
    for key, submission in index["submissions"].items():
        sources = [s for s in result.sources if submission["dir"] in s.path]
        assert len(sources) == 1
        resolved = submission["resolved_in_subset"]
        assert (sources[0].runs, sources[0].successes, sources[0].failures) == (50, resolved, 50 - resolved)
        by_id = {t.task_id: t for t in result.trajectories if submission["dir"] in t.source.file}
        for instance_id in index["instance_ids"]:
            assert by_id[instance_id].success == index["instances"][instance_id][key]["resolved"], instance_id


def test_non_run_files_are_listed_as_ignored(result: IngestResult) -> None:
    ignored = {Path(i.path).relative_to(DATA).as_posix() for i in result.ignored}
    assert "tau2/INDEX.json" in ignored and "tau2/domains/airline/tasks.json" in ignored
    assert not any("results/" in path for path in ignored)


def test_mislabelled_simulations_are_repaired_from_their_verdicts(result: IngestResult) -> None:
    source = _source(result, MISLABELLED)
    assert source.inconsistencies == source.repaired == 49
    trajectories = [t for t in result.trajectories if t.source.file.endswith(MISLABELLED)]
    assert len({t.task_id for t in trajectories}) == 50
    path = next(p for p in (DATA / "tau2" / "results").glob(f"*/{MISLABELLED}"))
    gold = {
        str(task["id"]): task["evaluation_criteria"]["actions"] or [] for task in json.loads(path.read_text())["tasks"]
    }
    for trajectory in trajectories:
        # The gold actions attached are those of the repaired task, and agree with the recorded checks.
        assert trajectory.diagnostics["gold_actions"] == gold[trajectory.task_id], trajectory.id
        checks = trajectory.diagnostics["reward_info"]["action_checks"] or []
        assert [c["action"]["action_id"] for c in checks] == [a["action_id"] for a in gold[trajectory.task_id]], (
            trajectory.id
        )
    first = next(t for t in trajectories if t.id.endswith("b2edae74-ba1e-49d6-a5e4-192fc17c0718"))
    assert first.task_id == "27"
    assert "ethan_martin_2396" in json.dumps(first.metadata["user_instructions"])
    other = [s for s in result.sources if s.format == "tau2_results" and not s.path.endswith(MISLABELLED)]
    assert all(s.inconsistencies == 0 for s in other)


def test_contract_fields(result: IngestResult) -> None:
    tau2 = next(
        t
        for t in result.trajectories
        if t.source.benchmark == "tau2-telecom" and any(m.role == "user" and m.tool_calls for m in t.messages)
    )
    assert set(tau2.diagnostics) == {"reward_info", "gold_actions", "communicate_info", "nl_assertions"}
    assert {"domain", "policy", "user_instructions", "task_description", "agent_llm", "user_llm", "timestamp"} <= set(
        tau2.metadata
    )
    tool = next(m for m in tau2.messages if m.role == "tool")
    assert tool.tool_call_id and any(c.id == tool.tool_call_id for m in tau2.messages for c in m.tool_calls)
    swe = {t.id.split("/")[0]: t for t in result.trajectories if t.task_id == "django__django-11265"}
    openhands = next(t for t in swe.values() if t.source.format == "openhands")
    assert openhands.diagnostics["patch"] == "" and openhands.success is False
    mini = next(t for t in swe.values() if t.source.format == "mini_swe_agent")
    assert mini.diagnostics["patch"].startswith("diff --git") and mini.diagnostics["exit_status"] == "Submitted"
    assert set(mini.diagnostics["tests_status"]) == {"FAIL_TO_PASS", "PASS_TO_PASS"}
    unfinished = next(
        t for t in result.trajectories if t.task_id == "django__django-10097" and t.source.format == "openhands"
    )
    assert unfinished.diagnostics["tests_status"] == {} and unfinished.diagnostics["patch_successfully_applied"] is None
    assert (
        "separability_matrix"
        in next(t for t in result.trajectories if t.task_id == "astropy__astropy-12907").metadata["problem_statement"]
    )


def test_jsonl_round_trip_of_real_trajectories(result: IngestResult, tmp_path: Path) -> None:
    path = tmp_path / "all.jsonl"
    assert write_jsonl(result.trajectories, path) == len(result.trajectories)
    back = list(read_jsonl(path))
    assert [t.model_dump() for t in back] == [t.model_dump() for t in result.trajectories]


def test_dataset_round_trip_of_real_trajectories(result: IngestResult) -> None:
    sample = [
        next(t for t in result.trajectories if t.source.format == fmt)
        for fmt in ("tau2_results", "mini_swe_agent", "openhands")
    ]
    sample += [t for t in result.trajectories if t.source.benchmark == "tau2-telecom"][:5]
    back = from_dataset(to_dataset(sample))
    assert [t.model_dump() for t in back] == [t.model_dump() for t in sample]
