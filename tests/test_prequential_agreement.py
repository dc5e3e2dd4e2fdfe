"""benchmarks/prequential_agreement.py: the rules of the commit before each round's labels, rebuilt from git."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_modules import load_benchmark

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    shallow = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--is-shallow-repository"], capture_output=True, text=True
    )
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        pytest.skip("needs the repository's full git history")
    return load_benchmark("prequential_agreement")


def test_each_rounds_rules_come_from_before_its_labels(bench) -> None:
    sample = json.loads((REPO / "labels" / "sample.json").read_text(encoding="utf-8"))
    rounds = {bench.trajectory_id(e): e.get("round", 1) for e in sample}
    commits = bench.label_commits(rounds)
    assert set(range(2, 11)) <= set(commits)

    def holds(commit: str, round_: int) -> bool:
        """Whether the reference labels at `commit` hold any item of round `round_`."""
        shown = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{commit}:{bench.REFERENCE}"], capture_output=True, text=True
        )
        return shown.returncode == 0 and any(
            rounds.get(bench.trajectory_id(e)) == round_ for e in json.loads(shown.stdout)
        )

    for round_ in range(2, 11):
        assert holds(commits[round_], round_) and not holds(f"{commits[round_]}^", round_), round_


def test_an_old_commits_detectors_run_from_its_own_package(bench, tmp_path: Path) -> None:
    sample = json.loads((REPO / "labels" / "sample.json").read_text(encoding="utf-8"))
    rules_of = bench.git(
        "rev-parse", bench.label_commits({bench.trajectory_id(e): e.get("round", 1) for e in sample})[2] + "^"
    ).strip()
    site = bench.build_package(rules_of, tmp_path)
    shown = subprocess.run(
        [sys.executable, "-c", "import tracegym.analysis.detect_tau as d; print(d.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(site), "PATH": ""},
        cwd=site,
    )
    assert Path(shown.stdout.strip()).is_relative_to(site)
    old = (site / "tracegym" / "analysis" / "detect_tau.py").read_text()
    assert (
        old
        == bench.git("show", f"{rules_of}:analysis/detect_tau.py")
        != (REPO / "analysis" / "detect_tau.py").read_text()
    )
    run = REPO / "tests" / "fixtures" / "tau_v1_small.json"
    for values in (bench.detector_values(site, [run]), bench.detector_values(None, [run])):
        assert len(values) == 3
        for labels in values.values():
            assert set(labels) == {
                "structured_data_reasoning",
                "multi_step_task_completion",
                "precondition_verification",
                "tool_calling_precision",
                "policy_compliance",
                "failure_source",
            }
        assert sum(labels["failure_source"] is None for labels in values.values()) == 1  # one success among the three
    (site / "tracegym" / "analysis" / "attribution.py").write_text("raise ImportError('broken on purpose')\n")
    with pytest.raises(RuntimeError, match="broken on purpose"):
        bench.detector_values(site, [run])


def test_a_malformed_round_range_is_refused_with_its_form(bench, capsys) -> None:
    for bad in ("5", "x-3", "9-2"):
        with pytest.raises(SystemExit):
            bench.main(["--rounds", bad])
        assert "--rounds takes FIRST-LAST" in capsys.readouterr().err


def test_paired_agreement_refuses_a_base_that_is_no_commit(capsys) -> None:
    paired = load_benchmark("paired_agreement")
    with pytest.raises(SystemExit):
        paired.main(["no-such-commit"])
    assert "'no-such-commit' is not a commit of this repository" in capsys.readouterr().err


def test_paired_agreement_of_a_commit_with_itself_moves_nothing(shared_data: Path, capsys) -> None:
    if not (shared_data / "tau2" / "results").is_dir():
        pytest.skip(f"{shared_data / 'tau2' / 'results'} is absent")
    paired = load_benchmark("paired_agreement")
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    detectors_changed = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", "HEAD", "--", "analysis"]).returncode
    if detectors_changed:
        pytest.skip("the working tree's detectors differ from HEAD's")
    assert paired.main([head, "--split", "tune"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert len(rows) == 6 and all(row.endswith("  0 moved") and "+0.00 [+0.00, +0.00]" in row for row in rows)
