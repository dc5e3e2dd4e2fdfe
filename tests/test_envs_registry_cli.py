"""Registry, the capability table, capability matching, checks reporting and the envs/synth command line."""

from __future__ import annotations

import json

import pytest

from tracegym.analysis.catalogue import CATALOGUE
from tracegym.cli import main
from tracegym.schema import Capability, CapabilityReport, CapabilityStats, EnvSpec, read_jsonl
from tracegym.synth_envs.checks import rejection_report, verify_generated
from tracegym.synth_envs.registry import CAPABILITY_TABLE, families, get_family, make_env, match_capabilities


def test_make_env_sets_knobs_and_rejects_unknown_ones() -> None:
    env = make_env("structured_data_reasoning", n_customers=10)
    assert env.knobs()["n_customers"] == 10
    with pytest.raises(TypeError):
        make_env("structured_data_reasoning", no_such_knob=1)
    with pytest.raises(KeyError, match="known:"):
        get_family("juggling")
    assert get_family("Tool-Calling Precision").name == "tool_calling_precision"  # normalised names
    assert get_family("policy_compliance").name == "precondition_verification"  # a capability of the table
    with pytest.raises(KeyError, match="capability without a family: code_repair offers run_tests"):
        get_family("test_verification")


def unmatched_catalogue_capabilities(catalogue=CATALOGUE) -> list[str]:
    """Catalogue capabilities with no row in the table, or a row without a family and a reason."""
    return [
        c.name
        for c in catalogue
        if c.name not in CAPABILITY_TABLE or not (CAPABILITY_TABLE[c.name].family or CAPABILITY_TABLE[c.name].reason)
    ]


def test_every_catalogue_capability_has_a_row() -> None:
    assert unmatched_catalogue_capabilities() == []
    planted = (*CATALOGUE, Capability(name="humour", description="Telling a joke at the right moment."))
    assert unmatched_catalogue_capabilities(planted) == ["humour"]
    for name, row in CAPABILITY_TABLE.items():
        assert row.reason, name
        assert row.family is None or row.family in families(), (name, row)
        assert any(c.name == name for c in CATALOGUE), f"{name}: table row for a capability the catalogue lacks"


def test_every_family_lists_the_capability_it_trains() -> None:
    for name, cls in families().items():
        assert CAPABILITY_TABLE[cls.capability].family == name, (name, cls.capability)


def test_matching_by_table_description_and_unmatched() -> None:
    capabilities = [
        Capability(name="multi_step_task_completion", description="x"),
        Capability(name="test_verification", description="x"),
        Capability(
            name="recovering_from_api_failures",
            origin="proposed",
            description="Retrying after transient tool errors and following error messages instead of giving up.",
        ),
        Capability(
            name="root_cause_hunting",
            origin="proposed",
            description="Finding the cause of a metric change by comparing segments and time windows with queries.",
        ),
        Capability(
            name="friendly_tone", origin="proposed", description="Greeting customers warmly and sounding polite."
        ),
        Capability(
            name="retrying_failed_calls",
            description="Retrying after transient tool errors and following error messages.",
        ),
    ]
    matches = {m.capability: m for m in match_capabilities(capabilities)}
    assert (matches["multi_step_task_completion"].method, matches["multi_step_task_completion"].family) == (
        "table",
        "multi_step_task_completion",
    )
    assert matches["test_verification"].family is None and matches["test_verification"].method == "no family"
    assert "run_tests" in matches["test_verification"].reason
    assert matches["recovering_from_api_failures"].family == "error_recovery"
    assert matches["recovering_from_api_failures"].method == "description"
    assert matches["root_cause_hunting"].family == "causal_diagnosis"
    assert matches["friendly_tone"].family is None and matches["friendly_tone"].method == "unmatched"
    # text similarity is for proposed capabilities only: a catalogue-origin name outside the table is unmatched
    assert (
        matches["retrying_failed_calls"].family is None and "only proposed" in matches["retrying_failed_calls"].reason
    )


def test_rejection_report_counts_regenerations() -> None:
    report = rejection_report(make_env("structured_data_reasoning"), range(60))
    assert report.seeds == 60 and report.attempts >= 60
    assert 0.0 < report.rejection_rate < 0.6 and sum(report.reasons.values()) == report.attempts - report.seeds
    assert report.as_dict()["rejection_rate"] == round(report.rejection_rate, 4)


def test_verifier_rejects_an_episode_whose_wrong_answer_scores_full() -> None:
    env = make_env("error_recovery")
    env.reset(3)
    assert verify_generated(env, env.generator_seed) is None
    # a generator seed whose episode has no failing package is rejected by the family check
    fresh = make_env("error_recovery", failure_rate=0.0)
    with pytest.raises(RuntimeError, match="no acceptable episode"):
        fresh.reset(0)


def _report(names: list[tuple[str, str]]) -> CapabilityReport:
    stats = [
        CapabilityStats(
            capability=Capability(name=n, description=d),
            cov=[0.5],
            er_minus=[0.5],
            er_plus=[0.1],
            delta=[0.4],
            runs_passed=10,
            selected=True,
        )
        for n, d in names
    ]
    return CapabilityReport(capabilities=stats, selected=[n for n, _ in names])


def test_cli_list_show_and_synth(tmp_path, capsys) -> None:
    assert main(["envs", "list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in families())
    assert main(["envs", "show", "error_recovery", "--seed", "4", "--knob", "n_packages=2"]) == 0
    shown = capsys.readouterr().out
    assert "oracle reward 1.0" in shown and "--- assistant ---" in shown and '"n_packages": 2' in shown
    path = tmp_path / "capabilities.json"
    path.write_text(
        _report(
            [("tool_calling_precision", "exact args"), ("friendly_tone", "sounding polite and warm")]
        ).model_dump_json()
    )
    assert main(["synth", str(path), "--out", str(tmp_path / "envs")]) == 0
    out = capsys.readouterr().out
    assert "UNMATCHED" in out and "calibration off" in out
    specs = list(read_jsonl(tmp_path / "envs" / "env_specs.jsonl", EnvSpec))
    assert [s.family for s in specs] == ["tool_calling_precision"] and specs[0].calibration["calibrated"] is False
    matches = json.loads((tmp_path / "envs" / "matches.json").read_text())
    assert {m["capability"]: m["family"] for m in matches} == {
        "tool_calling_precision": "tool_calling_precision",
        "friendly_tone": None,
    }
    assert json.loads((tmp_path / "envs" / "calibration.json").read_text())["calibrated"] is False


def test_cli_errors_are_one_line(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"nope": 1}')
    assert main(["synth", str(bad), "--out", str(tmp_path / "o")]) == 1
    assert "not a CapabilityReport" in capsys.readouterr().err
    assert main(["envs", "show", "juggling"]) == 1
    assert "unknown environment family" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_synth_calibrates_with_a_real_backend(tmp_path, capsys) -> None:
    path = tmp_path / "capabilities.json"
    path.write_text(_report([("precondition_verification", "check before acting")]).model_dump_json())
    assert (
        main(
            [
                "synth",
                str(path),
                "--out",
                str(tmp_path / "envs"),
                "--calibration",
                "--model",
                "tiny",
                "--calibration-seeds",
                "2",
                "--calibration-rollouts",
                "2",
                "--max-new-tokens",
                "8",
            ]
        )
        == 0
    )
    data = json.loads((tmp_path / "envs" / "calibration.json").read_text())
    assert data["families"][0]["curve"] and data["families"][0]["policy"] == "hf:tiny"
