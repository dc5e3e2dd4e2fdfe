"""A SWE-bench run in the experiments-repository layout (tests/fixtures/swebench_experiments) ingests
and diagnoses; every record it cannot read is listed, with --keep-going and without."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracegym.analysis.detect_swe import detect
from tracegym.analysis.ingest import IngestError, ingest_paths
from tracegym.cli import main
from tracegym.schema import LabelValue

SUBMISSION = Path(__file__).parent / "fixtures" / "swebench_experiments" / "20250101_demo-agent"
SKIPPED = ("trajs/pkg__pkg-3.md", "pkg__pkg-4 is listed in results.json (no_generation)", "all_preds.jsonl")


def test_the_layout_ingests_with_verdicts_patches_and_both_trajectory_kinds() -> None:
    result = ingest_paths([SUBMISSION.parent], keep_going=True)
    by_task = {t.task_id: t for t in result.trajectories}
    assert sorted(by_task) == ["pkg__pkg-1", "pkg__pkg-2"]
    assert [s.format for s in result.sources] == ["swebench_experiments"] and result.sources[0].skipped == 3
    one, two = by_task["pkg__pkg-1"], by_task["pkg__pkg-2"]
    assert one.success and not two.success and one.source.agent == "demo-agent"
    assert one.diagnostics["tests_status"]["FAIL_TO_PASS"]["success"] == ["pkg/tests/test_parser.py::test_issue"]
    assert "reproduce.py" in two.diagnostics["patch"]  # from all_preds.jsonl: the SWE-agent trajectory holds none
    assert "```bash\nedit 1:1" in two.messages[2].content and two.messages[3].role == "user"
    assert len(result.skipped) == 3 and all(any(s in f"{r.path}: {r.reason}" for r in result.skipped) for s in SKIPPED)
    (flag,) = result.inconsistencies
    assert (
        "report.json says resolved=True for pkg__pkg-2, results.json says False" in flag.message and not flag.repaired
    )
    with pytest.raises(IngestError):
        ingest_paths([SUBMISSION])


def test_the_layout_is_diagnosed_with_evidence_and_keep_going_lists_every_skip(tmp_path: Path, capsys) -> None:
    verdicts = {t.task_id: detect(t) for t in ingest_paths([SUBMISSION], keep_going=True).trajectories}
    careful, hasty = verdicts["pkg__pkg-1"], verdicts["pkg__pkg-2"]
    assert {k: v.value for k, v in careful.items()} == {k: LabelValue.PRESENT for k in careful}
    assert (
        hasty["issue_reproduction"].value == LabelValue.LACKING
        and hasty["test_verification"].value == LabelValue.LACKING
    )
    assert "scratch files left in the patch: reproduce.py" in hasty["edit_scope"].evidence[0].quote
    assert "none named like the failing tests" in hasty["fault_localisation"].evidence[0].quote
    out = tmp_path / "diag"
    assert main(["diagnose", str(SUBMISSION), "--out", str(out)]) == 1
    assert "--keep-going" in capsys.readouterr().err
    assert main(["diagnose", str(SUBMISSION), "--out", str(out), "--keep-going", "--bootstrap", "50"]) == 0
    printed = capsys.readouterr().out
    assert "skipped records (3)" in printed and all(s in printed for s in SKIPPED)
    markdown = (out / "report.md").read_text()
    assert "Skipped records (3)" in markdown and all(s in markdown for s in SKIPPED)
    report = json.loads((out / "capabilities.json").read_text())
    assert {c["capability"]["name"] for c in report["capabilities"]} == {
        "patch_production",
        "fault_localisation",
        "issue_reproduction",
        "test_verification",
        "edit_scope",
    }
