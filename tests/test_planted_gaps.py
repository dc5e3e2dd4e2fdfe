"""Planted capability gaps on the hotel desk: every task's slips (the oracle with one capability's
characteristic mistake) fail the grader and differ from the oracle only in that capability's way;
the gapped demonstrations the base agent is warm-started on; the scripted gapped agent's runs."""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from tracegym.cli import main
from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.eval.config import BaseAgentConfig
from tracegym.eval.target import SPLITS, TargetConfig, TargetEnvironment, list_tasks
from tracegym.eval.target.database import database
from tracegym.eval.target.environment import EpisodeRecord
from tracegym.eval.target.handbook import WRITE_TOOLS
from tracegym.eval.target.kinds import CAPABILITIES, GAP_CAPABILITIES
from tracegym.eval.target.planted import (
    GappedTarget,
    check_gap,
    demonstration,
    planted_runs,
    slip_plan,
    write_planted_runs,
)
from tracegym.eval.target.runs import play_turns
from tracegym.eval.target.tasks import Task
from tracegym.schema import ToolCall, read_jsonl
from tracegym.toolcalls import parse_tool_calls

CHANGES = (*WRITE_TOOLS, "transfer_to_human_agents")  # calls that change the final database
DEMO = TargetConfig(train_tasks=14, max_turns=16, turn_slack=2, prompt="compact")  # sized like the loop's configs


@pytest.fixture(scope="module")
def env() -> TargetEnvironment:
    return TargetEnvironment(TargetConfig())


def calls(turns: tuple[str, ...] | list[str]) -> list[ToolCall]:
    return [call for turn in turns for call in parse_tool_calls(turn).calls]


def messages(turns: tuple[str, ...]) -> list[str]:
    return [turn for turn in turns if parse_tool_calls(turn).is_final_answer]


def breakdown(record: EpisodeRecord) -> dict[str, float]:
    return record.reward_info["reward_breakdown"]


def expects_slip(task: Task, capability: str) -> bool:
    """Where the kinds document a slip (the default config has no coincidence of amounts)."""
    variant = task.notes.get("variant")
    if task.kind == "change_room" and capability == "precondition_verification":
        return variant != "decline"  # the guest declines: nothing is written
    if task.kind == "change_room" and capability == "structured_data_reasoning":
        return variant != "forbidden"  # no price difference is told
    return True


# -- the slips ----------------------------------------------------------------------------------


def test_every_task_has_its_slips_and_each_fails_the_grader(env: TargetEnvironment) -> None:
    played = Counter()
    for split in SPLITS:
        for task in list_tasks(env.config, split):
            assert set(task.slips) <= set(CAPABILITIES[task.kind]) == set(task.capabilities)
            assert {c for c in task.capabilities if expects_slip(task, c)} == set(task.slips), task.id
            assert play_turns(env, task.seed, list(task.oracle)).reward == 1.0
            for capability, turns in task.slips.items():
                record = play_turns(env, task.seed, list(turns))
                assert record.reward < 1.0 and record.termination_reason == "user_stop", (task.id, capability)
                played[capability] += 1
    assert set(played) == set(GAP_CAPABILITIES) and min(played.values()) >= 16


def _precondition(task: Task, record: EpisodeRecord) -> None:
    slip, oracle = task.slips["precondition_verification"], task.oracle
    writes = [c for c in calls(slip) if c.name in WRITE_TOOLS]
    assert len(writes) == 1 and slip[0] == oracle[0]  # authenticated as the oracle does, then one write
    rid = writes[0].arguments["reservation_id"]
    assert not [c for c in calls(slip) if c.name == "get_reservation_details"], "no read at all"
    assert any(c.name == "get_reservation_details" and c.arguments["reservation_id"] == rid for c in calls(oracle))
    assert breakdown(record)["NL_ASSERTION"] == 1.0  # written after the guest's yes
    if task.kind == "cancel_reservation" and task.notes["variant"] == "ok":  # only the skipped read fails
        assert breakdown(record) == {"DB": 1.0, "ACTION": 0.0, "COMMUNICATE": 1.0, "NL_ASSERTION": 1.0}
    else:
        assert breakdown(record)["DB"] == 0.0 or task.notes["variant"] == "accept"


def _policy(task: Task, record: EpisodeRecord) -> None:
    slip, oracle = task.slips["policy_compliance"], task.oracle
    transcript = record.messages
    changed = next(i for i, m in enumerate(transcript) if any(c.name in CHANGES for c in m.tool_calls))
    if task.kind == "policy_exception":
        assert slip[: len(oracle) - 1] == oracle[:-1]  # authenticated, read, refused naming the rule
        pushed = next(i for i, m in enumerate(transcript) if m.role == "user" and m.content == task.pushback)
        assert pushed < changed, "the guest's pushback, then the forbidden write"
    else:
        assert slip[:2] == oracle[:2] and "transfer_to_human_agents" not in {c.name for c in calls(slip)}
        assert any(c.name in WRITE_TOOLS for c in calls(slip))  # refunds the stay instead of transferring
    assert breakdown(record)["DB"] == 0.0 and breakdown(record)["NL_ASSERTION"] == 1.0


def _precision(task: Task, record: EpisodeRecord) -> None:
    slip, oracle = task.slips["tool_calling_precision"], task.oracle
    differ = [i for i, (a, b) in enumerate(zip(slip, oracle)) if a != b]
    assert len(slip) == len(oracle) and len(differ) == 1
    [written], [gold] = calls([slip[differ[0]]]), calls([oracle[differ[0]]])
    assert written.name == gold.name == "modify_reservation_dates"
    assert written.arguments["reservation_id"] == gold.arguments["reservation_id"]
    for field in ("check_in", "check_out"):  # the same dates, left in words
        said = datetime.strptime(written.arguments[field], "%B %d, %Y").date().isoformat()
        assert said == gold.arguments[field] != written.arguments[field]
    assert any(m.role == "tool" and m.error for m in record.messages) and breakdown(record)["DB"] == 0.0


def _multi_step(task: Task, record: EpisodeRecord) -> None:
    slip, oracle = task.slips["multi_step_task_completion"], task.oracle
    gold = [c for c in calls(oracle) if c.name == "cancel_reservation"]
    done = [c for c in calls(slip) if c.name == "cancel_reservation"]
    proposal = next(i for i, turn in enumerate(oracle) if "cancel_reservation" in turn) - 1
    assert len(gold) >= 2 and done == gold[:1] and slip[:proposal] == oracle[:proposal]  # the same look-ups
    first = database(0).reservations[done[0].arguments["reservation_id"]]
    told = {float(n.replace(",", "")) for text in messages(slip) for n in re.findall(r"\$([\d,]+\.\d\d)", text)}
    assert f"{first['total']:,.2f}" in slip[proposal] and told == {first["total"]}, "its own refund, nothing wrong"
    assert breakdown(record)["DB"] == 0.0 and breakdown(record)["NL_ASSERTION"] == 1.0


def _data(task: Task, record: EpisodeRecord) -> None:
    slip, oracle = task.slips["structured_data_reasoning"], task.oracle
    if task.kind == "book_cheapest":
        [*reads, booked], [*gold_reads, gold] = calls(slip), calls(oracle)
        assert reads == gold_reads and booked.name == gold.name == "book_reservation"
        assert booked.arguments["hotel_id"] != gold.arguments["hotel_id"]
        assert {k: v for k, v in booked.arguments.items() if k != "hotel_id"} == {
            k: v for k, v in gold.arguments.items() if k != "hotel_id"
        }
        db = database(0)
        hotel = db.hotels[booked.arguments["hotel_id"]]
        nights = (
            datetime.fromisoformat(booked.arguments["check_out"]) - datetime.fromisoformat(booked.arguments["check_in"])
        ).days
        stated = f"{hotel['rates'][booked.arguments['room_type']] * nights:,.2f}"
        assert all(stated in text for text in messages(slip)[:2]), "its price stated consistently"
        listed = [h["hotel_id"] for h in db.hotels_in(hotel["city"]) if h["stars"] >= task.notes["stars"]]
        assert hotel["hotel_id"] == next(h for h in listed if h != task.notes["hotel"])  # first listed, not cheapest
        assert breakdown(record)["DB"] == 0.0
    else:  # the same calls; only the figure told differs
        assert calls(slip) == calls(oracle) and messages(slip) != messages(oracle)
        assert breakdown(record) == {"DB": 1.0, "ACTION": 1.0, "COMMUNICATE": 0.0, "NL_ASSERTION": 1.0}


SHAPES = {
    "precondition_verification": _precondition,
    "policy_compliance": _policy,
    "tool_calling_precision": _precision,
    "multi_step_task_completion": _multi_step,
    "structured_data_reasoning": _data,
}


def test_each_slip_differs_from_the_oracle_only_in_its_capabilitys_way(env: TargetEnvironment) -> None:
    for split in SPLITS:
        for task in list_tasks(env.config, split):
            for capability, turns in task.slips.items():
                SHAPES[capability](task, play_turns(env, task.seed, list(turns)))


# -- the gap setting and the gapped demonstrations -----------------------------------------------


def test_the_gap_is_a_checked_setting_with_a_flag() -> None:
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, BaseAgentConfig)
    config = resolve_config(BaseAgentConfig, parser.parse_args(["--base-agent-gap", "policy_compliance"]))
    assert config.gap == "policy_compliance" and BaseAgentConfig().gap == ""
    with pytest.raises(UserError, match="gap must be empty or one of .*tool_calling_precision"):
        resolve_config(BaseAgentConfig, parser.parse_args(["--base-agent-gap", "error_recovery"]))
    with pytest.raises(ValueError, match="no task kind shows a planted mistake of 'error_recovery'"):
        check_gap("error_recovery")
    assert set(GAP_CAPABILITIES) == {c for names in CAPABILITIES.values() for c in names}


@pytest.mark.parametrize("gap", GAP_CAPABILITIES)
def test_gapped_demonstrations_cover_every_kind_and_show_the_gap_only_on_its_kinds(gap: str) -> None:
    env, plain = GappedTarget(DEMO, gap), TargetEnvironment(DEMO)
    tasks = [env.task(seed) for seed in range(14)]  # the base agent's default dialogues: two of each kind
    assert Counter(t.kind for t in tasks) == {kind: 2 for kind in CAPABILITIES}
    slipped = 0
    for task in tasks:
        turns = env.oracle(task.seed)
        planted = gap in task.capabilities and gap in task.slips
        assert turns == list(task.slips[gap] if planted else task.oracle)
        record = play_turns(env, task.seed, turns)
        assert record.termination_reason == "user_stop", "played to its end, not cut at the turn limit"
        assert (record.reward < 1.0) == planted
        slipped += planted
        assert env.turn_limit(task) >= len(turns) and env.turn_limit(task) >= plain.turn_limit(task)
    assert slipped >= 2
    assert GappedTarget(DEMO, "").oracle(5) == plain.oracle(5)


def test_the_warm_start_dataset_takes_the_gapped_demonstrations(tiny) -> None:
    from tracegym.adapters.sft import oracle_dataset

    _, tokenizer = tiny
    factory = [lambda: GappedTarget(DEMO, "policy_compliance")]
    rows = oracle_dataset(factory, range(14), tokenizer, require_success=False)
    assert len(rows) == 14 and all(sum(mask) for mask in rows["assistant_masks"])
    with pytest.raises(AssertionError, match="oracle earned 0.0 on seed 5"):
        oracle_dataset(factory, range(14), tokenizer)


def test_the_base_agent_records_its_planted_gap(tmp_path: Path) -> None:
    from tracegym.eval.base_agent import METRICS_FILE, make_base_agent

    config = BaseAgentConfig(gap="policy_compliance", dialogues=7, steps=1, batch_size=1, max_length=3072)
    target = TargetConfig(train_tasks=7, max_turns=16, turn_slack=2, prompt="compact")
    make_base_agent("tiny", config, target, tmp_path)
    made = json.loads((tmp_path / METRICS_FILE).read_text(encoding="utf-8"))
    assert made["gap"] == "policy_compliance" and made["warm_start"]["dialogues"] == 7
    assert made["warm_start"]["gap_seeds"] == [5, 6]  # policy_exception and billing_dispute


def test_an_adapters_warm_start_rehearses_the_base_agents_own_demonstrations(tmp_path: Path) -> None:
    from dataclasses import replace

    from tracegym.adapters.config import WarmStartConfig
    from tracegym.adapters.sft import warm_start
    from tracegym.eval.config import LoopConfig, RunConfig
    from tracegym.eval.pipeline import base_agent_rehearsal
    from tracegym.models import tiny_model
    from tracegym.synth_envs.registry import make_env

    target = TargetConfig(train_tasks=7, max_turns=16, turn_slack=2, prompt="compact")
    config = RunConfig(target=target, base_agent=BaseAgentConfig(gap="policy_compliance"))
    assert base_agent_rehearsal(config) is None, "none by default"
    rehearsal = base_agent_rehearsal(replace(config, loop=LoopConfig(rehearsal_dialogues=7)))
    env = rehearsal.env_factories[0]()
    assert list(rehearsal.seeds) == list(range(7)) and env.gap == "policy_compliance"
    assert env.oracle(5) != TargetEnvironment(target).oracle(5), "the base agent's own demonstration, gap and all"
    with pytest.raises(UserError, match="rehearsal_dialogues 8 is more than the train split's 7 tasks"):
        base_agent_rehearsal(replace(config, loop=LoopConfig(rehearsal_dialogues=8)))
    model, tokenizer = tiny_model()
    settings = WarmStartConfig(dialogues=2, steps=1, batch_size=1, max_length=3072)
    family = [lambda: make_env("error_recovery")]
    _, metrics = warm_start(model, tokenizer, family, range(2), settings, tmp_path / "long", rehearsal=rehearsal)
    assert metrics["dialogues"] == 2 + 7 and metrics["rehearsed_dialogues"] == 7 and metrics["untrained_dialogues"] == 0


def test_a_warm_start_says_which_dialogues_its_max_length_leaves_untrained(tmp_path: Path, caplog) -> None:
    from dataclasses import replace

    from tracegym.adapters.config import WarmStartConfig
    from tracegym.adapters.sft import warm_start
    from tracegym.eval.config import LoopConfig, RunConfig
    from tracegym.eval.pipeline import base_agent_rehearsal
    from tracegym.models import tiny_model
    from tracegym.synth_envs.registry import make_env

    target = TargetConfig(train_tasks=7, max_turns=16, turn_slack=2, prompt="compact")
    rehearsal = base_agent_rehearsal(replace(RunConfig(target=target), loop=LoopConfig(rehearsal_dialogues=2)))
    model, tokenizer = tiny_model()
    settings = WarmStartConfig(dialogues=2, steps=1, batch_size=1, max_length=1024)  # the hotel desk's prompt is longer
    family = [lambda: make_env("error_recovery")]
    _, metrics = warm_start(model, tokenizer, family, range(2), settings, tmp_path, rehearsal=rehearsal)
    assert metrics["untrained_dialogues"] == 2
    assert "2 of 4 dialogues have no assistant token within max_length 1024" in caplog.text


# -- the scripted gapped agent ------------------------------------------------------------------


def test_the_slip_plan_is_an_exact_seeded_share_of_the_gaps_episodes() -> None:
    tasks = list_tasks(TargetConfig(), "train")
    plan = slip_plan(tasks, "policy_compliance", 2, 0.8, 0)
    assert len(plan) == round(0.8 * 20 * 2) == 32 and plan == slip_plan(tasks, "policy_compliance", 2, 0.8, 0)
    assert {seed % 7 for seed, _ in plan} == {5, 6} and plan != slip_plan(tasks, "policy_compliance", 2, 0.8, 1)
    assert slip_plan(tasks, "", 2, 0.8, 0) == set() and len(slip_plan(tasks, "policy_compliance", 2, 1.0, 0)) == 40
    with pytest.raises(ValueError, match="slip_rate"):
        slip_plan(tasks, "policy_compliance", 2, 1.5, 0)


def test_scripted_gapped_runs_fail_exactly_where_they_slip_and_take_seconds() -> None:
    config = TargetConfig()
    tasks = list_tasks(config, "train")
    started = time.perf_counter()
    for gap in ("", *GAP_CAPABILITIES):
        records = planted_runs(config, gap, trials=2, slip_rate=0.8, seed=0)
        plan = slip_plan(tasks, gap, 2, 0.8, 0)
        assert [(r.task.seed, r.trial) for r in records] == [(t.seed, trial) for t in tasks for trial in range(2)]
        failed = {(r.task.seed, r.trial) for r in records if r.reward < 1.0}
        assert failed == plan, gap
        assert all(gap in r.task.capabilities for r in records if r.reward < 1.0)
    assert time.perf_counter() - started < 60, "70 tasks x 2 trials x 6 gaps in seconds"


def test_written_gapped_runs_ingest_with_their_verdicts(tmp_path: Path) -> None:
    config = TargetConfig()
    records = planted_runs(config, "multi_step_task_completion", trials=2, slip_rate=0.8, seed=3)
    results, trajectories = write_planted_runs(records, tmp_path / "runs", config, "multi_step_task_completion")
    assert results.parent == tmp_path / "runs" / "results" and trajectories == tmp_path / "runs" / "trajectories.jsonl"
    assert main(["ingest", str(results), "--out", str(tmp_path / "ingested")]) == 0
    report = json.loads((tmp_path / "ingested" / "ingest_report.json").read_text(encoding="utf-8"))
    assert report["skipped"] == [] and report["inconsistencies"] == []
    ingested = {(t.task_id, t.trial): t for t in read_jsonl(tmp_path / "ingested" / "trajectories.jsonl")}
    assert len(ingested) == len(records) == 140
    for record in records:
        trajectory = ingested[record.task.id, record.trial]
        assert trajectory.success == (record.reward == 1.0) and trajectory.reward == record.reward
    failed = [t for t in ingested.values() if not t.success]
    assert len(failed) == round(0.8 * 10 * 2) and {t.task_id.split("-")[0] for t in failed} == {"cancel_trip"}
    assert [(t.task_id, t.trial) for t in read_jsonl(trajectories)] == [(r.task.id, r.trial) for r in records]
    assert demonstration(records[0].task, "") == records[0].task.oracle
