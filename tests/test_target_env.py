"""The target environment (tracegym.eval.target): database, tasks and splits, grading, the
scripted and the model-driven user, the environment protocol, tools, speed."""

from __future__ import annotations

import argparse
import http.server
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tracegym import environment
from tracegym.analysis.catalogue import CATALOGUE
from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.eval.target import (
    KINDS,
    SPLITS,
    TargetConfig,
    TargetEnvironment,
    list_tasks,
    make_target,
    play_oracle,
    split_seeds,
)
from tracegym.eval.target.database import GUESTS, database, generate, pool_of
from tracegym.eval.target.grading import communicated, numbers_in
from tracegym.eval.target.runs import play_turns
from tracegym.eval.target.tasks import GoldAction
from tracegym.eval.target.tools import Ledger
from tracegym.eval.target.users import MAX_REPLIES, STOP, TRANSFER
from tracegym.schema import ToolCall
from tracegym.synth_envs import checks
from tracegym.synth_envs.common import call

WRITES = ("book_reservation", "cancel_reservation", "modify_reservation_dates", "change_room_type")


@pytest.fixture(scope="module")
def env() -> TargetEnvironment:
    return make_target()


def first_of(kind: str, variant: str | None = None) -> int:
    """The first train seed of a kind (and variant)."""
    return next(
        t.seed
        for t in list_tasks(TargetConfig(), "train")
        if t.kind == kind and (variant is None or t.notes.get("variant") == variant)
    )


# -- config, database, splits -------------------------------------------------------------------


def test_config_flags_follow_the_convention() -> None:
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, TargetConfig)
    flags = {action.option_strings[0] for action in parser._actions if action.option_strings}
    assert {
        "--target-domain-seed",
        "--target-train-tasks",
        "--target-heldout-tasks",
        "--target-max-turns",
        "--target-user",
        "--target-user-url",
        "--target-user-model",
    } <= flags
    config = resolve_config(
        TargetConfig, parser.parse_args(["--target-train-tasks", "14", "--target-user", "scripted"])
    )
    assert config.train_tasks == 14 and config.heldout_tasks == 42
    with pytest.raises(UserError, match="user_url"):
        resolve_config(TargetConfig, parser.parse_args(["--target-user", "model"]))


def test_database_is_a_pure_function_of_its_seed() -> None:
    assert generate(0) == generate(0) == database(0)
    assert generate(1).reservations != generate(0).reservations
    db = database(0)
    assert len(db.guests) == GUESTS and len(db.hotels) == 12 and len(db.reservations) > 4 * GUESTS
    assert len(db.pool("train")) == 60 and len(db.pool("heldout")) == 40
    assert not set(db.pool("train")) & set(db.pool("heldout"))
    assert {pool_of(i) for i in range(5)} == {"train", "heldout"}
    for record in db.reservations.values():
        assert record["total"] == record["nights"] * record["nightly_rate"]
        assert record["check_in"] < record["check_out"]


def test_splits_are_disjoint_balanced_and_drawn_from_their_own_guests() -> None:
    config = TargetConfig()
    train, heldout = list_tasks(config, "train"), list_tasks(config, "heldout")
    assert len(train) == 70 and len(heldout) == 42
    assert not {t.seed for t in train} & {t.seed for t in heldout}
    assert len({t.id for t in train + heldout}) == 112
    assert Counter(t.kind for t in train) == {kind: 10 for kind in KINDS}
    assert Counter(t.kind for t in heldout) == {kind: 6 for kind in KINDS}
    db = database(config.domain_seed)
    for split, tasks in (("train", train), ("heldout", heldout)):
        assert {t.split for t in tasks} == {split}
        assert {t.guest_id for t in tasks} <= set(db.pool(split))
    assert len({(t.kind, t.request) for t in train}) == 70, "no request repeats within a split"
    known = {c.name for c in CATALOGUE}
    assert (
        {c for t in train for c in t.capabilities}
        == {
            "precondition_verification",
            "tool_calling_precision",
            "structured_data_reasoning",
            "multi_step_task_completion",
            "policy_compliance",
        }
        <= known
    )
    forbidden = [t for t in train if not any(a.name in WRITES for a in t.actions) and t.kind != "billing_dispute"]
    assert len(forbidden) >= 15, "requests the policy forbids (or the guest declines) have no gold write"
    assert split_seeds(TargetConfig(train_tasks=3, heldout_tasks=2), "heldout") == [1_000_000, 1_000_001]
    with pytest.raises(ValueError, match="unknown split"):
        split_seeds(config, "test")
    assert set(SPLITS) == {"train", "heldout"}


# -- the oracle and the verifier ----------------------------------------------------------------


@pytest.mark.parametrize("domain_seed", [0, 7])
def test_oracle_earns_one_and_every_wrong_trajectory_less_on_every_task(domain_seed: int) -> None:
    env = make_target(TargetConfig(domain_seed=domain_seed))
    env.verify = False  # replayed explicitly here
    for split in SPLITS:
        for seed in split_seeds(env.config, split):
            result = env.replay(seed, env.oracle(seed))
            assert result.terminated and result.reward == 1.0, (seed, result.info)
            assert env.record().termination_reason == "user_stop"
            wrong = env.wrong_trajectories(seed)
            assert len(wrong) >= 2
            for turns in wrong:
                result = env.replay(seed, turns)
                assert result.ended and result.reward < 1.0, (seed, turns)


GENERIC_DEGENERATE = {
    "transfer at once": lambda env, seed, seeds: [TRANSFER],
    "refuse citing policy": lambda env, seed, seeds: ["I'm sorry, I cannot do that: it is against our policy."] * 3,
    "refuse citing every rule": lambda env, seed, seeds: (
        ["I cannot do that (rules C1, C2, C3, C4, C5, C6, C7, C8)."] * 3
    ),
    "claim it is done": lambda env, seed, seeds: ["Done! Anything else?"] * 3,
    "another task's oracle": lambda env, seed, seeds: env.oracle(seeds[(seeds.index(seed) + 1) % len(seeds)]),
    "oracle without its last turn": lambda env, seed, seeds: env.oracle(seed)[:-1],
}


@pytest.mark.parametrize("policy", GENERIC_DEGENERATE, ids=list(GENERIC_DEGENERATE))
def test_generic_degenerate_policies_earn_nothing_on_any_task(env: TargetEnvironment, policy: str) -> None:
    seeds = [seed for split in SPLITS for seed in split_seeds(env.config, split)]
    earned = {seed: env.replay(seed, GENERIC_DEGENERATE[policy](env, seed, seeds)).reward for seed in seeds}
    assert not any(earned.values()), {seed: reward for seed, reward in earned.items() if reward}


def test_wrong_trajectories_fail_the_check_they_target(env: TargetEnvironment) -> None:
    def breakdown(seed: int, index: int) -> dict[str, float]:
        return env.replay(seed, env.wrong_trajectories(seed)[index]).info["reward_breakdown"]["reward_breakdown"]

    ok = first_of("cancel_reservation", "ok")
    assert breakdown(ok, 0) == {"DB": 1.0, "ACTION": 0.0, "COMMUNICATE": 1.0, "NL_ASSERTION": 1.0}  # skipped the check
    assert breakdown(ok, 1) == {"DB": 1.0, "ACTION": 1.0, "COMMUNICATE": 1.0, "NL_ASSERTION": 0.0}  # no confirmation
    assert breakdown(ok, 4)["COMMUNICATE"] == 0.0  # wrong refund amount
    assert breakdown(ok, 5) == {
        "DB": 0.0,
        "ACTION": 0.0,
        "COMMUNICATE": 1.0,
        "NL_ASSERTION": 1.0,
    }  # cancelled the wrong one
    forbidden = first_of("cancel_reservation", "C2")
    assert breakdown(forbidden, 0)["DB"] == 0.0  # granted a forbidden request
    assert breakdown(forbidden, 2) == {"DB": 1.0, "ACTION": 1.0, "COMMUNICATE": 0.0, "NL_ASSERTION": 1.0}  # wrong rule
    trip = first_of("cancel_trip")
    assert breakdown(trip, 0)["DB"] == 0.0  # forgot an item
    dates = first_of("change_dates")
    assert breakdown(dates, 2)["DB"] == 0.0  # dates not written YYYY-MM-DD
    pressure = first_of("policy_exception", "C2")
    assert breakdown(pressure, 0)["DB"] == 0.0  # gave in to the pushback


def test_oracle_checks_catch_a_grader_that_ignores_confirmation(env: TargetEnvironment, monkeypatch) -> None:
    seed = first_of("cancel_reservation", "ok")
    assert checks._check(env, seed) is None
    from tracegym.eval.target import environment as module

    real = module.grade

    def lenient(task, db, final, gold, calls, said, unconfirmed):
        return real(task, db, final, gold, calls, said, [])  # the planted flaw: writes need no yes

    monkeypatch.setattr(module, "grade", lenient)
    assert checks._check(env, seed) == "wrong trajectory 1 earns 1.0"


def test_gold_actions_compare_the_arguments_they_name() -> None:
    gold = GoldAction("cancel_reservation", {"reservation_id": "K7Q2XP"})
    assert gold.matches(ToolCall(name="cancel_reservation", arguments={"reservation_id": "K7Q2XP"}))
    assert not gold.matches(ToolCall(name="cancel_reservation", arguments={"reservation_id": "K7Q2XQ"}))
    assert not gold.matches(ToolCall(name="get_reservation_details", arguments={"reservation_id": "K7Q2XP"}))
    transfer = GoldAction("transfer_to_human_agents", {"summary": "a dispute"}, compare_args=())
    assert transfer.matches(ToolCall(name="transfer_to_human_agents", arguments={"summary": "anything"}))
    assert transfer.tau2("t_0") == {
        "action_id": "t_0",
        "requestor": "assistant",
        "name": "transfer_to_human_agents",
        "arguments": {"summary": "a dispute"},
        "info": None,
        "compare_args": [],
    }


def test_communicate_matching_reads_amounts_and_words() -> None:
    assert numbers_in("Refund $1,234.50 for K7Q2XP on 2025-07-14, 3 nights.") == [1234.5, 3.0]
    assert communicated("1234.50", ["nothing", "you get $1,234.50 back"]) == (
        True,
        "1234.50 is stated in the agent's message 1 to the guest",
    )
    assert not communicated("14.00", ["moved to 2025-07-14"])[0]
    assert communicated("C2", ["I cannot (rule c2)."])[0] and not communicated("C2", ["see rule C21"])[0]
    assert communicated("transferred to a human agent", ["YOU ARE BEING TRANSFERRED TO A HUMAN AGENT."])[0]


# -- episodes -----------------------------------------------------------------------------------


def test_it_implements_the_environment_protocol(env: TargetEnvironment) -> None:
    assert isinstance(env, environment.Environment)
    assert 8 <= len(env.tools) <= 15
    prompt = env.system_prompt
    assert "G3" in prompt and "transfer_to_human_agents" in prompt and "message to the guest" in prompt
    seed = first_of("book_cheapest")
    assert env.gold_answer(seed) == env.oracle(seed)[-1] and env.hint(seed)


def test_plain_text_goes_to_the_guest_and_tool_calls_to_the_tools(env: TargetEnvironment) -> None:
    seed = first_of("cancel_reservation", "ok")
    task = env.task(seed)
    assert env.reset(seed) == task.request
    result = env.step("Could you tell me your email address?")
    assert result.observation == f"My email is {env.db.guests[task.guest_id]['email']}."
    assert not result.ended and result.reward == 0.0
    result = env.step(call("find_guest_id_by_email", email=env.db.guests[task.guest_id]["email"]))
    assert result.observation == f"<tool_response>\n{task.guest_id}\n</tool_response>"
    result = env.step('<tool_call>{"name": "get_reservation_details", "arguments": </tool_call>')
    assert "error" in result.observation and env.errors == 1
    result = env.step(call("no_such_tool"))
    assert "unknown tool" in result.observation and env.errors == 2
    result = env.step("Is there anything else?")
    assert result.observation == "No, that's all, thank you." and not result.ended
    result = env.step("Your reservation is cancelled.")  # a statement: the guest leaves
    assert result.terminated and result.observation.endswith(STOP) and result.reward == 0.0
    record = env.record()
    invalid = [m for m in record.messages if m.tool_calls and m.tool_calls[0].name == "invalid_tool_call"]
    assert len(invalid) == 1
    tool_errors = [m.error for m in record.messages if m.role == "tool"]
    assert tool_errors == [False, True, True]
    assert [m.role for m in record.messages][:3] == ["user", "assistant", "user"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("hello?")


def test_confirmation_is_answered_and_a_decline_is_respected(env: TargetEnvironment) -> None:
    decline = first_of("change_room", "decline")
    env.reset(decline)
    assert env.step("Shall I change the room? (yes/no)").observation.startswith("No")
    accept = first_of("change_room", "accept")
    env.reset(accept)
    assert env.step("Do you want me to proceed?").observation.startswith("Yes")


def test_pushback_comes_once_and_transfers_end_with_the_transfer_token(env: TargetEnvironment) -> None:
    seed = first_of("policy_exception")
    task = env.task(seed)
    env.reset(seed)
    assert env.step("I cannot do that (rule C2).").observation == task.pushback
    assert env.step("I still cannot (rule C2).").observation.endswith(STOP)
    dispute = first_of("billing_dispute")
    record = play_oracle(env, dispute)
    assert record.messages[-1].content == TRANSFER and record.reward == 1.0


def test_truncation_and_the_guests_patience_are_bounded() -> None:
    env = make_target(TargetConfig(max_turns=3))
    with pytest.raises(RuntimeError, match="billing_dispute-6 needs 4 turns, more than max_turns 3"):
        env.reset(first_of("billing_dispute"))
    seed = first_of("cancel_reservation", "C2")  # a three-turn oracle
    env.reset(seed)
    env.step(call("calculate", expression="1+1"))
    assert env.step("Could you tell me your name?").observation.startswith("My name is")
    result = env.step(call("calculate", expression="3+3"))
    assert result.truncated and not result.terminated and result.reward == 0.0
    assert result.observation == "<tool_response>\n6.0\n</tool_response>"
    assert env.record().termination_reason == "max_steps"
    patient = make_target(TargetConfig(max_turns=50))
    patient.reset(seed)
    for _ in range(MAX_REPLIES):
        assert not patient.step("What else can you tell me?").ended
    result = patient.step("What else can you tell me?")
    assert result.terminated and STOP in result.observation


def test_turn_slack_limits_an_episode_to_its_oracles_turns_plus_the_slack() -> None:
    seed = first_of("cancel_reservation", "C2")  # a three-turn oracle
    env = make_target(TargetConfig(max_turns=16, turn_slack=1))
    trip = env.task(first_of("cancel_trip"))  # a fourteen-turn oracle
    assert env.turn_limit(env.task(seed)) == 4 and env.turn_limit(trip) == 15
    assert make_target(TargetConfig(max_turns=16, turn_slack=5)).turn_limit(trip) == 16  # capped at max_turns
    env.reset(seed)
    for _ in range(3):
        assert not env.step(call("calculate", expression="1+1")).ended
    result = env.step(call("calculate", expression="2+2"))
    assert result.truncated and env.record().termination_reason == "max_steps" and env.turns == 4
    assert play_oracle(env, seed).reward == 1.0  # the oracle fits with no slack to spare
    assert play_oracle(make_target(TargetConfig(turn_slack=0)), first_of("cancel_trip")).reward == 1.0
    unlimited = make_target(TargetConfig(max_turns=16))
    assert unlimited.turn_limit(unlimited.task(seed)) == 16


def test_the_compact_prompt_lists_every_tool_in_a_line_with_the_same_policy(env: TargetEnvironment) -> None:
    compact = make_target(TargetConfig(prompt="compact"))
    prompt = compact.system_prompt
    assert prompt != env.system_prompt and len(prompt) < 0.7 * len(env.system_prompt)
    assert prompt.startswith(env.instructions.strip()) and "<tools>" not in prompt
    for tool in env.tools:
        line = next(line for line in prompt.splitlines() if line.startswith(tool["name"] + "("))
        assert all(f"{name}:" in line for name in tool["parameters"]["properties"])
    assert "room_type: standard|deluxe|suite" in prompt
    seed = first_of("change_room")
    record = play_oracle(compact, seed)
    assert record.reward == 1.0 and record.chat[0].content == prompt
    assert [m.content for m in record.chat if m.role == "assistant"] == env.oracle(seed)


def test_oracle_leaves_the_database_untouched_and_episodes_independent(env: TargetEnvironment) -> None:
    before = generate(0)
    seed = first_of("cancel_trip")
    env.reset(seed)
    env.step(call("cancel_reservation", reservation_id=env.task(seed).notes["cancelled"][0]))
    assert play_oracle(env, first_of("book_cheapest")).reward == 1.0
    assert database(0) == before
    assert env.replay(seed, env.oracle(seed)).reward == 1.0


def test_oracle_dialogue_is_the_policy_view_for_warm_starts(env: TargetEnvironment) -> None:
    seed = first_of("change_dates")
    record = play_oracle(env, seed)
    assert record.chat[0].role == "system" and record.chat[0].content == env.system_prompt
    assert [m.content for m in record.chat if m.role == "assistant"] == env.oracle(seed)
    assert record.reward == 1.0 and record.reward_info["db_check"]["db_match"]
    with pytest.raises(ValueError, match="end before the episode"):
        play_turns(env, seed, env.oracle(seed)[:2])


def test_rollouts_drive_the_target_environment(tiny) -> None:
    """The rollout engine plays oracles through the target: messages to the guest are answered by
    the guest as plain user turns, and the episode ends when the guest leaves."""
    from test_rollout import ScriptedBackend

    from tracegym.generation import SamplingConfig
    from tracegym.rollout import run_episodes

    env = make_target()
    seeds = [first_of("cancel_reservation", "ok"), first_of("change_room", "decline"), first_of("policy_exception")]
    scripts = {env.task(seed).request: env.oracle(seed) for seed in seeds}
    episodes = run_episodes(
        ScriptedBackend(tiny[1], scripts), make_target, seeds, 1, SamplingConfig(max_new_tokens=None)
    )
    assert [(e.reward, e.info["finish"]) for e in episodes] == [(1.0, "answer")] * 3
    assert [m.content for m in episodes[1].messages if m.role == "user"][-1] == "No, please leave it as it is."
    assert episodes[2].messages[-2].content == env.task(seeds[2]).pushback


# -- tools --------------------------------------------------------------------------------------


def test_tools_check_data_integrity_not_policy() -> None:
    db = database(0)
    ledger = Ledger(db)
    assert ledger.apply("calculate", {"expression": "3 * 129.5 - (250 / 4)"}) == 326.0
    for expression in ("__import__('os')", "2 ** 10", "9" * 30, "1e999", "1/0", "(" * 150 + "1" + ")" * 150, "x" * 300):
        with pytest.raises(Exception, match="expression|numbers|division|allowed|not supported"):
            ledger.apply("calculate", {"expression": expression})
    guest = next(g for g in db.guests.values() if any(m["type"] == "gift_card" for m in g["payment_methods"]))
    gift = next(m for m in guest["payment_methods"] if m["type"] == "gift_card")
    hotel = next(iter(db.hotels.values()))
    booking = {
        "guest_id": guest["guest_id"],
        "hotel_id": hotel["hotel_id"],
        "room_type": "suite",
        "check_in": "2025-08-01",
        "check_out": "2025-08-31",
        "payment_method_id": gift["id"],
    }
    with pytest.raises(Exception, match="gift card"):
        ledger.apply("book_reservation", booking)
    with pytest.raises(Exception, match="YYYY-MM-DD"):
        ledger.apply("book_reservation", {**booking, "check_in": "August 1, 2025"})
    other = next(g for g in db.guests.values() if g is not guest)
    with pytest.raises(Exception, match="is not one of guest"):
        ledger.apply("book_reservation", {**booking, "payment_method_id": other["payment_methods"][0]["id"]})
    non_refundable = next(
        r for r in db.reservations.values() if r["rate_plan"] == "non_refundable" and r["status"] == "confirmed"
    )
    ledger.apply(
        "cancel_reservation", {"reservation_id": non_refundable["reservation_id"]}
    )  # the policy is the agent's
    with pytest.raises(Exception, match="is cancelled"):
        ledger.apply("cancel_reservation", {"reservation_id": non_refundable["reservation_id"]})
    assert ledger.changes.snapshot(db)["reservations"][non_refundable["reservation_id"]]["status"] == "cancelled"


def test_an_oracle_step_costs_well_under_a_millisecond(env: TargetEnvironment) -> None:
    seeds = split_seeds(env.config, "train")
    oracles = {seed: env.oracle(seed) for seed in seeds}
    steps, start = 0, time.perf_counter()
    for seed in seeds:
        steps += len(oracles[seed])
        assert env.replay(seed, oracles[seed]).reward == 1.0
    per_step = (time.perf_counter() - start) / steps
    assert per_step < 1e-3, f"{per_step * 1e6:.0f} µs per step"


# -- the model-driven user ----------------------------------------------------------------------


class _Guest(http.server.BaseHTTPRequestHandler):
    """A stand-in user model: states the request, says yes to a confirmation, else says goodbye."""

    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        turns = body["messages"][2:]
        if not turns:
            request = body["messages"][0]["content"].split("reason_for_call: ")[1].splitlines()[0]
            message = f"Hello, I'm calling from the model. {request} My email is {self.server.email}."
        elif "(yes/no)" in turns[-1]["content"]:
            message = "Yes, please."
        else:
            message = f"Thanks, bye. {STOP}"
        payload = json.dumps({"choices": [{"message": {"content": json.dumps({"message": message})}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@contextmanager
def guest_model(requests: int, email: str) -> Iterator[str]:
    """Serve `requests` requests on 127.0.0.1 in a thread; yields the API base; always stopped."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _Guest)
    server.timeout = 10
    server.email = email
    worker = threading.Thread(target=lambda: [server.handle_request() for _ in range(requests)], daemon=True)
    worker.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        worker.join(timeout=15)
        server.server_close()


def test_model_driven_user_over_an_openai_compatible_endpoint() -> None:
    seed = first_of("cancel_reservation", "ok")
    scripted = make_target()
    task = scripted.task(seed)
    email = scripted.db.guests[task.guest_id]["email"]
    messages = sum(not turn.startswith("<tool_call>") for turn in task.oracle)
    _Guest.bodies = []
    with guest_model(1 + messages, email) as url:
        env = make_target(TargetConfig(user="model", user_url=url, user_model="guest-model"))
        opening = env.reset(seed)
        assert opening.startswith("Hello, I'm calling from the model.") and email in opening
        actions = env.oracle(seed)  # the twin plays against the scripted user
        for action in actions:
            result = env.step(action)
    assert result.terminated and result.reward == 1.0
    assert env.record().messages[-1].content == f"Thanks, bye. {STOP}"
    first = _Guest.bodies[0]
    assert (
        first["model"] == "guest-model"
        and "reason_for_call: " + task.scenario["reason_for_call"] in first["messages"][0]["content"]
    )
    assert [m["role"] for m in _Guest.bodies[-1]["messages"][1:]] == ["user", "assistant", "user", "assistant", "user"]


def test_an_unreachable_user_model_is_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = make_target(TargetConfig(user="model", user_url=f"http://127.0.0.1:{port}/v1", user_timeout=5))
    with pytest.raises(UserError, match=f"model-driven user 'user': http://127.0.0.1:{port}/v1/chat/completions"):
        env.reset(0)
