"""τ² detectors around the domain policy on hand-built runs, attribution from the run alone, and the
real runs: selection, benchmark-blamed failures, agreement with the tune half of the reference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from benchmark_modules import load_benchmark
from tau_runs import USER, L, N, P, Run, booking, cancel, looked_up, quotes, values

from tracegym.analysis.attribution import attribute
from tracegym.analysis.contrast import contrast, failing_for_every_agent
from tracegym.analysis.detect_tau import detect
from tracegym.analysis.diagnose import diagnose
from tracegym.analysis.ingest import ingest_paths
from tracegym.analysis.rules import corrections, telecom
from tracegym.schema import Label, LabelValue, Trajectory

PAPER_TAU_CAPABILITIES = {
    "structured_data_reasoning",
    "multi_step_task_completion",
    "precondition_verification",
    "tool_calling_precision",
}
REPO = Path(__file__).resolve().parents[1]


def test_clean_run_is_present_everywhere_it_applies() -> None:
    run = (
        looked_up("ABC123")
        .say("ABC123 was booked today, so it can be cancelled with a full refund. Cancel ABC123?")
        .user("Yes, please.")
        .call("cancel_reservation", booking("ABC123"), reservation_id="ABC123")
        .say("Done.")
    )
    assert values(run.trajectory([cancel("ABC123")], [True], success=True)) == {
        "structured_data_reasoning": P,
        "multi_step_task_completion": N,
        "precondition_verification": P,
        "tool_calling_precision": P,
        "policy_compliance": P,
    }  # one request with one write needs no multi-step work


def test_multi_step_completion_is_needed_where_the_task_involves_two_writes() -> None:
    both = (
        looked_up("ABC123")
        .call("get_reservation_details", booking("XYZ789"), reservation_id="XYZ789")
        .say("Both were booked today. Cancel ABC123 and XYZ789?")
        .user("yes")
        .call("cancel_reservation", booking("ABC123"), reservation_id="ABC123")
        .call("cancel_reservation", booking("XYZ789"), reservation_id="XYZ789")
    )
    assert (
        values(both.trajectory([cancel("ABC123"), cancel("XYZ789")], [True, True], success=True))[
            "multi_step_task_completion"
        ]
        == P
    )
    again = (
        looked_up("ABC123")
        .say("Cancel ABC123?")
        .user("yes")
        .call("cancel_reservation", "Error: try again", error=True, reservation_id="ABC123")
        .call("cancel_reservation", booking("ABC123"), reservation_id="ABC123")
    )
    assert (
        values(again.trajectory([cancel("ABC123")], [True], success=True))["multi_step_task_completion"] == N
    )  # one write, twice
    upgrade = {"reservation_id": "ABC123", "cabin": "business", "flights": [], "payment_id": "credit_card_1"}
    moved = {**upgrade, "flights": [{"flight_number": "HAT002", "date": "2024-05-21"}]}
    upgraded = (
        looked_up("ABC123")
        .say("Upgrade ABC123 to business, then move it to HAT002 on May 21?")
        .user("yes")
        .call("update_reservation_flights", booking("ABC123"), **upgrade)
        .call("update_reservation_flights", booking("ABC123"), **moved)
    )
    gold_twice = [
        {"name": "update_reservation_flights", "arguments": upgrade},
        {"name": "update_reservation_flights", "arguments": moved},
    ]
    assert (
        values(upgraded.trajectory(gold_twice, [True, True], success=True))["multi_step_task_completion"] == P
    )  # gold never retries
    never = looked_up("ABC123").say("I see your reservation. Anything else?").user("No. ###STOP###")
    assert (
        values(never.trajectory([cancel("ABC123")], [False]))["multi_step_task_completion"] == L
    )  # the only request, undone
    put_off = (
        looked_up("ABC123")
        .say("Shall I cancel ABC123 now?")
        .user("Hold off please, I will call back later. ###STOP###")
    )
    assert (
        values(put_off.trajectory([cancel("ABC123")], [False]))["multi_step_task_completion"] == N
    )  # the user's choice
    refused = (
        looked_up("ABC123").say("ABC123 can only be cancelled by a supervisor.").user("Never mind then. ###STOP###")
    )
    assert (
        values(refused.trajectory([cancel("ABC123")], [False]))["multi_step_task_completion"] == L
    )  # gave up after a no
    sent_away = (
        looked_up("ABC123")
        .say("ABC123 can be cancelled; please contact us again tomorrow and we'll do it then.")
        .user("OK, I will reach out again later. ###STOP###")
    )
    assert (
        values(sent_away.trajectory([cancel("ABC123")], [False]))["multi_step_task_completion"] == L
    )  # the agent put it off
    looped = (
        looked_up("ABC123")
        .say("Cancel ABC123?")
        .user("yes")
        .call("cancel_reservation", booking("ABC123"), reservation_id="ABC123")
    )
    for _ in range(3):
        looped.call("transfer_to_human_agents", "Transfer successful", summary="x")
    cut = looped.trajectory([cancel("ABC123")], [True], termination="max_steps")
    assert (
        values(cut)["multi_step_task_completion"] == L
    )  # a loop until max_steps stays LACKING (labels/round5_brief.md)


def test_a_request_refused_under_the_policy_then_another_carried_out_makes_two_operations() -> None:
    old = {"created": "2024-05-01T10:00:00"}
    then_booked = (
        looked_up("ABC123", **old)
        .say("ABC123 does not meet the cancellation criteria, so I'm unable to cancel it.")
        .user("Then book me JFK to LAX on May 24.")
        .say("Book HAT001 on May 24 for $200 on your visa 4321?")
        .user("yes")
        .call("book_reservation", booking("NEW001"), origin="JFK", destination="LAX", payment_id="credit_card_1")
    )
    gold = [
        {
            "name": "book_reservation",
            "arguments": {"origin": "JFK", "destination": "LAX", "payment_id": "credit_card_1"},
        }
    ]
    assert values(then_booked.trajectory(gold, [True], success=True))["multi_step_task_completion"] == P
    alone = (
        looked_up("ABC123", **old)
        .say("ABC123 does not meet the cancellation criteria, so I'm unable to cancel it.")
        .user("OK. ###STOP###")
    )
    assert (
        values(alone.trajectory([], [], success=True))["multi_step_task_completion"] == N
    )  # one request, rightly refused


def test_a_dictated_value_is_the_users_choice_not_a_misread() -> None:
    # The user dictates a new zip code; gold expects another one. Not a misread, not an unread record.
    def address_change(zip_code: str) -> Trajectory:
        run = (
            Run("retail", policy="")
            .user("I'm Bo, bo@x.com; set my address to 1 Main St, zip 90210.")
            .call("find_user_id_by_email", "bo_1", email="bo@x.com")
            .call(
                "get_user_details",
                {"user_id": "bo_1", "address": {"address1": "9 Elm", "zip": "10001"}},
                user_id="bo_1",
            )
            .say(f"I will change your address to 1 Main St, {zip_code}. Confirm?")
            .user("yes")
            .call("modify_user_address", {"user_id": "bo_1"}, user_id="bo_1", address1="1 Main St", zip=zip_code)
        )
        gold = {
            "name": "modify_user_address",
            "arguments": {"user_id": "bo_1", "address1": "1 Main St", "zip": "90211"},
        }
        return run.trajectory([gold], [False])

    dictated = address_change("90210")
    assert L not in values(dictated).values()
    source = attribute(dictated)
    assert source.source == "user_simulator" and "user's own words" in source.evidence.quote
    invented = address_change("90213")  # a value nobody said is the agent's own
    assert values(invented)["tool_calling_precision"] == L and attribute(invented).source == "agent"


def test_an_offer_the_user_echoes_is_the_agents_choice_and_a_write_the_system_refused_granted_nothing() -> None:
    order = {
        "order_id": "#W1",
        "user_id": "bo_1",
        "status": "pending",
        "payment_history": [{"transaction_type": "payment", "payment_method_id": "paypal_1", "amount": 10}],
        "items": [{"name": "Camera", "product_id": "P1", "item_id": "100", "options": {"color": "red"}, "price": 10}],
    }
    product = {
        "name": "Camera",
        "product_id": "P1",
        "variants": {
            "200": {"item_id": "200", "options": {"color": "silver"}, "available": True, "price": 12},
            "300": {"item_id": "300", "options": {"color": "black"}, "available": True, "price": 11},
        },
    }
    swap = {"order_id": "#W1", "item_ids": ["100"], "payment_method_id": "paypal_1"}

    def run(first: str) -> Trajectory:
        steps = (
            Run("retail", policy="")
            .user(f"I'm bo@x.com, I want a better camera{first}.")
            .call("find_user_id_by_email", "bo_1", email="bo@x.com")
            .call("get_order_details", order, order_id="#W1")
            .call("get_product_details", product, product_id="P1")
            .say("The silver camera (item 200) is the best. Exchange item 100 for it, refund to paypal_1?")
            .user("Yes, the silver one.")
            .call(
                "exchange_delivered_order_items",
                "Error: Non-delivered order cannot be exchanged",
                error=True,
                new_item_ids=["200"],
                **swap,
            )
            .say(
                "Your order is pending, so I can modify it instead: item 100 for the silver item 200, paypal_1. "
                "Proceed?"
            )
            .user("yes")
            .call("modify_pending_order_items", order, new_item_ids=["200"], **swap)
        )
        gold = [
            {"name": "exchange_delivered_order_items", "arguments": {**swap, "new_item_ids": ["300"]}},
            {"name": "modify_pending_order_items", "arguments": {**swap, "new_item_ids": ["300"]}},
        ]
        return steps.trajectory(gold, [False, False])

    echoed = run("")
    verdicts = values(echoed)
    assert verdicts["structured_data_reasoning"] == L and verdicts["policy_compliance"] == P
    assert "refused by the system" in quotes(echoed, "precondition_verification")
    assert (
        attribute(echoed).source == "agent"
    )  # the refused gold exchange changed nothing; the item was the agent's pick
    dictated = run(", the silver one")
    assert values(dictated)["structured_data_reasoning"] == P and attribute(dictated).source == "user_simulator"


def test_a_payment_method_the_user_named_in_words_is_the_users_choice() -> None:
    bags = {"reservation_id": "ABC123", "total_baggages": 3, "nonfree_baggages": 2, "payment_id": "credit_card_1"}
    run = (
        looked_up("ABC123")
        .user("Add three bags and charge my Visa.")
        .say("I'll add 3 checked bags to ABC123: 2 cost $50 each on your visa 4321. Shall I?")
        .user("yes")
        .call("update_reservation_baggages", booking("ABC123", bags=3), **bags)
    )
    gold = [{"name": "update_reservation_baggages", "arguments": {**bags, "payment_id": "gift_card_9"}}]
    assert attribute(run.trajectory(gold, [False])).source == "user_simulator"
    assert values(run.trajectory(gold, [False]))["tool_calling_precision"] == P


def test_data_reasoning_is_needed_where_the_agent_read_data_even_if_all_the_work_is_on_the_users_device() -> None:
    device = [{"name": "toggle_airplane_mode", "arguments": {}, "requestor": "user"}]
    run = (
        Run("telecom", policy="")
        .user("No signal, my number is 555-123-2002.")
        .call("get_customer_by_phone", {"customer_id": "C1", "line_ids": ["L2"]}, phone_number="555-123-2002")
    )
    trajectory = run.trajectory(device, [True], success=True)
    trajectory.diagnostics["gold_actions"] = device
    assert values(trajectory)["structured_data_reasoning"] == P  # careful readers: PRESENT in 8 of 9 such tune items
    silent = (
        Run("telecom", policy="")
        .user("No signal.")
        .say("Please turn airplane mode off.")
        .trajectory(device, [True], success=True)
    )
    silent.diagnostics["gold_actions"] = device
    assert values(silent)["structured_data_reasoning"] == N  # no tool called, none the agent's to call
    misread = (
        Run("telecom", policy="")
        .user("No signal, my number is 555-123-2002.")
        .call("get_details_by_id", {"line_id": "L1", "phone_number": "555-123-2001", "status": "Active"}, id="L1")
        .say("Your line is active.")
        .trajectory(device, [True], success=True)
    )
    misread.diagnostics["gold_actions"] = device
    assert values(misread)["structured_data_reasoning"] == L  # shown all the same


def test_a_missed_action_is_paired_with_the_call_on_the_same_record() -> None:
    # Gold cancels ABC123 and XYZ789; the agent cancels ABC123 (right) and never XYZ789.
    run = (
        looked_up("ABC123")
        .call("get_reservation_details", booking("XYZ789"), reservation_id="XYZ789")
        .say("Both were booked today. Cancel ABC123 now?")
        .user("yes")
        .call("cancel_reservation", booking("ABC123"), reservation_id="ABC123")
        .say("Done, anything else?")
        .user("No. ###STOP###")
    )
    trajectory = run.trajectory([cancel("ABC123"), cancel("XYZ789")], [True, False])
    verdicts = detect(trajectory)
    assert verdicts["multi_step_task_completion"].value == L
    assert "never carried out: cancel_reservation" in verdicts["multi_step_task_completion"].evidence[0].quote
    assert "XYZ789" in verdicts["multi_step_task_completion"].evidence[0].quote
    assert verdicts["tool_calling_precision"].value == P and verdicts["structured_data_reasoning"].value == P
    assert attribute(trajectory).source == "agent"  # the closing "anything else?" awaits no answer


def test_a_wrong_record_read_from_the_data_is_data_reasoning_and_a_wrong_record() -> None:
    run = (
        looked_up("ABC123")
        .call("get_reservation_details", booking("XYZ789"), reservation_id="XYZ789")
        .say("Cancel XYZ789, booked today?")
        .user("yes")
        .call("cancel_reservation", booking("XYZ789"), reservation_id="XYZ789")
    )
    verdicts = detect(run.trajectory([cancel("ABC123")], [False]))
    assert verdicts["structured_data_reasoning"].value == L
    assert verdicts["structured_data_reasoning"].evidence[0].quote.startswith("wrong value read from the data")
    assert verdicts["tool_calling_precision"].value == L  # and a write on the wrong record (labels/round5_brief.md)
    assert verdicts["tool_calling_precision"].evidence[0].quote.startswith("write on another record")
    # one cancellation asked for: the write on another record is what the agent did, not a second
    # operation the task involves (labels/round5_brief.md: judge from the task, not the agent)
    assert verdicts["multi_step_task_completion"].value == N


def test_a_request_the_policy_refuses_is_still_one_the_user_made() -> None:
    book = {
        "name": "book_reservation",
        "arguments": {"user_id": "ana_1", "flights": [{"flight_number": "HAT002", "date": "2024-05-21"}]},
    }

    def operations(cancels: bool) -> LabelValue:
        run = looked_up("ABC123", created="2024-05-01T10:00:00")  # economy, no insurance, booked two weeks ago
        if cancels:
            run.say("Cancel ABC123?").user("yes").call("cancel_reservation", booking("ABC123"), reservation_id="ABC123")
        run.say("Book HAT002 on May 21?").user("yes").call(book["name"], booking("NEW001"), **book["arguments"])
        return detect(run.trajectory([book], [True]))["multi_step_task_completion"].value

    assert operations(cancels=True) == P  # the forbidden cancellation, then the booking: two requests
    assert operations(cancels=False) == N  # the booking alone


def test_a_skipped_lookup_is_not_a_missed_step() -> None:
    run = (
        looked_up("ABC123")
        .say("Cancel ABC123 (booked today)?")
        .user("yes")
        .call("cancel_reservation", booking("ABC123"), reservation_id="ABC123")
    )
    calculate = {"name": "calculate", "arguments": {"expression": "200 * 1"}}
    assert detect(run.trajectory([calculate, cancel("ABC123")], [False, True]))["multi_step_task_completion"].value == N
    book = {"name": "book_reservation", "arguments": {"user_id": "ana_1"}}
    assert detect(run.trajectory([book, cancel("ABC123")], [False, True]))["multi_step_task_completion"].value == L


def test_writes_need_an_explicit_yes_to_their_details_and_a_read_record() -> None:
    bags = {
        "name": "update_reservation_baggages",
        "arguments": {
            "reservation_id": "ABC123",
            "total_baggages": 1,
            "nonfree_baggages": 0,
            "payment_id": "credit_card_1",
        },
    }
    confirmed = (
        looked_up("ABC123")
        .say("I'll add 1 checked bag to ABC123, free with your allowance. Shall I?")
        .user("Yes")
        .call(bags["name"], booking("ABC123", bags=1), **bags["arguments"])
    )
    assert detect(confirmed.trajectory([bags], [True], success=True))["precondition_verification"].value == P
    unasked = looked_up("ABC123").call(bags["name"], booking("ABC123", bags=1), **bags["arguments"])
    verdict = detect(unasked.trajectory([bags], [True], success=True))["precondition_verification"]
    assert verdict.value == L and "without an explicit yes" in verdict.evidence[0].quote
    unread = (
        Run()
        .user("cancel ABC123, I booked it today")
        .say("Cancel ABC123?")
        .user("yes")
        .call("cancel_reservation", booking("ABC123"), reservation_id="ABC123")
    )
    assert "without reading it first" in quotes(
        unread.trajectory([cancel("ABC123")], [True]), "precondition_verification"
    )
    same = [
        {"first_name": "Ana", "last_name": "Diaz", "dob": "1990-01-01"}
    ]  # no new passenger: no detail to name, the yes suffices
    resaved = (
        looked_up("ABC123")
        .say("I'll update the passengers on ABC123. Shall I?")
        .user("yes")
        .call("update_reservation_passengers", booking("ABC123"), reservation_id="ABC123", passengers=same)
    )
    assert detect(resaved.trajectory([], [], success=True))["precondition_verification"].value == P


def test_the_user_restating_the_request_after_the_proposal_is_an_explicit_yes() -> None:
    bags = {"reservation_id": "ABC123", "total_baggages": 1, "nonfree_baggages": 0, "payment_id": "credit_card_1"}

    def answered(reply: str) -> str:
        run = (
            looked_up("ABC123")
            .say("I'll add 1 checked bag to ABC123, free with your allowance. Please confirm.")
            .user(reply)
            .call("update_reservation_baggages", booking("ABC123", bags=1), **bags)
        )
        write = {"name": "update_reservation_baggages", "arguments": bags}
        return detect(run.trajectory([write], [True], success=True))["precondition_verification"].value

    assert answered("It's for my trip. Please add the bag to ABC123. Thanks.") == P
    assert answered("Please don't add it yet, I need to think.") == L
    assert answered("That’s right.") == P and answered("Don’t, I need to think.") == L  # typographic apostrophes too


CUSTOMER = {"customer_id": "C1", "phone_number": "555-123-2002", "line_ids": ["L2"]}


def test_the_user_choosing_a_refuel_with_its_price_in_view_confirms_it() -> None:
    """The telecom policy: ask how much data to refuel, confirm the price. An answer that chooses
    the amount after the price was stated agrees to it; a question about it, or a refusal, does not."""

    def answered(offer: str, reply: str) -> LabelValue:
        line = {"line_id": "L2", "phone_number": "555-123-2002", "data_used_gb": 15.1, "data_refueling_gb": 0.0}
        run = (
            Run("telecom", policy="")
            .user("No data, my number is 555-123-2002.")
            .call("get_customer_by_phone", CUSTOMER, phone_number="555-123-2002")
            .call("get_details_by_id", line, id="L2")
            .say(offer)
            .user(reply)
            .call("refuel_data", {**line, "data_refueling_gb": 2.0}, customer_id="C1", line_id="L2", gb_amount=2.0)
        )
        return values(run.trajectory([], [], success=True))["precondition_verification"]

    offer = "You have used your data. I can refuel up to 2 GB at $2.00 per GB. How much would you like?"
    assert answered(offer, "I’d like 2.0 GB, but I don’t want to change my plan.") == P
    assert answered(offer, "2 GB is what my sister has.") == L  # no wish: a remark, not a choice
    assert answered(offer, "Yes, please go ahead.") == P
    assert answered(offer, "What would 2 GB cost in total?") == L
    assert answered(offer, "No, I don't want 2 GB.") == L
    assert (
        answered("Your data is used up. How much data would you like to add?", "2 GB, please.") == L
    )  # no price stated


def test_the_original_payment_method_names_a_method_the_reservation_was_paid_with() -> None:
    def change(payment_id: str) -> Run:
        paid = {**booking("ABC123"), "payment_history": [{"payment_id": "gift_card_7", "amount": 200}]}
        flights = {
            "reservation_id": "ABC123",
            "cabin": "economy",
            "flights": [{"flight_number": "HAT002", "date": "2024-05-20"}],
            "payment_id": payment_id,
        }
        return (
            Run()
            .user("Move ABC123 to a later flight, please.")
            .call("get_reservation_details", paid, reservation_id="ABC123")
            .say("I'll change ABC123 to HAT002; the difference goes to your original payment method. Shall I?")
            .user("Yes")
            .call("update_reservation_flights", paid, **flights)
        )

    def verdict(run: Run) -> str:
        return detect(run.trajectory([], [], success=True))["precondition_verification"].value

    assert verdict(change("gift_card_7")) == P
    assert verdict(change("credit_card_9")) == L  # a method the reservation was never paid with is no "original" one


def test_a_downgrade_refunded_to_the_original_payment_needs_no_payment_named() -> None:
    def recabin(cabin: str, new_cabin: str) -> str:
        paid = {**booking("ABC123", cabin=cabin), "payment_history": [{"payment_id": "gift_card_7", "amount": 200}]}
        change = {
            "reservation_id": "ABC123",
            "cabin": new_cabin,
            "flights": [{"flight_number": "HAT001", "date": "2024-05-20"}],
            "payment_id": "gift_card_7",
        }
        run = (
            Run()
            .user("Change the cabin of ABC123, please.")
            .call("get_reservation_details", paid, reservation_id="ABC123")
            .say(f"I'll move ABC123 to {new_cabin}. Shall I?")
            .user("Yes")
            .call("update_reservation_flights", paid, **change)
        )
        return detect(run.trajectory([], [], success=True))["precondition_verification"].value

    assert recabin("business", "economy") == P  # the difference goes back where it came from
    assert recabin("economy", "business") == L  # a charge: the user must agree to the method


def test_a_failed_write_counts_when_it_mattered_and_a_solo_run_needs_no_yes() -> None:
    bags = {"reservation_id": "ABC123", "total_baggages": 1, "nonfree_baggages": 0, "payment_id": "credit_card_1"}
    run = (
        looked_up("ABC123")
        .say("Add 1 checked bag to ABC123 for free?")
        .user("yes")
        .call("update_reservation_baggages", "Error: reservation is locked", error=True, **bags)
    )
    gold = [{"name": "update_reservation_baggages", "arguments": bags}]
    assert "failed write, never redone" in quotes(
        run.trajectory(gold, [True], success=False), "precondition_verification"
    )
    assert values(run.trajectory(gold, [True], success=True))["precondition_verification"] == P  # it did not matter
    solo = Run()
    solo.messages = [m for m in looked_up("ABC123").messages if m.role != "user"]
    solo.call("update_reservation_baggages", booking("ABC123", bags=1), **bags)
    assert values(solo.trajectory(gold, [True], success=True))["precondition_verification"] == P  # nobody to ask


def test_cancellation_follows_the_policy_conditions() -> None:
    def cancelled(user_text: str, proposal: str = "Cancel ABC123?", **record) -> dict[str, LabelValue]:
        run = (
            Run()
            .user(user_text)
            .call("get_user_details", USER, user_id="ana_1")
            .call("get_reservation_details", booking("ABC123", **record), reservation_id="ABC123")
            .say(proposal)
            .user("yes")
            .call("cancel_reservation", booking("ABC123", **record), reservation_id="ABC123")
        )
        return values(run.trajectory([cancel("ABC123")], [True], success=True))

    assert cancelled("cancel ABC123")["policy_compliance"] == P  # booked within 24 hours
    old = {"created": "2024-05-01T10:00:00"}
    assert cancelled("cancel ABC123, plans changed", **old)["policy_compliance"] == L
    assert cancelled("cancel ABC123, plans changed", **old)["precondition_verification"] == L
    knowingly = cancelled(
        "cancel ABC123, plans changed", "ABC123 is not eligible for a refund. Cancel it anyway?", **old
    )
    assert (
        knowingly["policy_compliance"] == L and knowingly["precondition_verification"] == P
    )  # checked, then broke the rule
    assert cancelled("cancel ABC123, I am sick", insurance="yes", **old)["policy_compliance"] == P
    assert cancelled("cancel ABC123, plans changed", cabin="business", **old)["policy_compliance"] == P
    flown = cancelled("cancel ABC123", date="2024-05-10")
    assert (
        flown["policy_compliance"] == L and flown["structured_data_reasoning"] == L
    )  # read the flown flight as upcoming
    told = cancelled(
        "cancel ABC123", "Your flight on May 10 was already flown. Cancel ABC123 anyway?", date="2024-05-10"
    )
    assert told["policy_compliance"] == L and told["structured_data_reasoning"] == P  # read right, broke the rule
    # A rule applies only when the run's policy holds the sentence it implements.
    other = Run(policy="The current time is 2024-05-15 15:00:00 EST. Cancel whatever the user asks.")
    run = (
        other.user("cancel ABC123")
        .call("get_reservation_details", booking("ABC123", **old), reservation_id="ABC123")
        .call("cancel_reservation", booking("ABC123", **old), reservation_id="ABC123")
    )
    assert values(run.trajectory([cancel("ABC123")], [True], success=True))["policy_compliance"] == P


def test_gold_that_breaks_the_policy_blames_the_benchmark_not_the_compliant_agent() -> None:
    old = {"created": "2024-05-01T10:00:00"}
    run = (
        Run()
        .user("cancel ABC123, plans changed")
        .call("get_user_details", USER, user_id="ana_1")
        .call("get_reservation_details", booking("ABC123", **old), reservation_id="ABC123")
        .say("ABC123 was booked over 24 hours ago in economy without insurance, so the policy does not allow a refund.")
        .user("Fine. ###STOP###")
    )
    trajectory = run.trajectory([cancel("ABC123")], [False])
    assert values(trajectory)["policy_compliance"] == P and values(trajectory)["multi_step_task_completion"] == N
    source = attribute(trajectory)
    assert source.source == "benchmark" and "over 24 h" in source.evidence.quote
    business = (
        Run()
        .user("cancel ABC123")
        .call("get_user_details", USER, user_id="ana_1")
        .call("get_reservation_details", booking("ABC123", cabin="business", **old), reservation_id="ABC123")
        .say("ABC123 cannot be cancelled under our policy.")
        .user("ok ###STOP###")
    )
    refused = business.trajectory([cancel("ABC123")], [False])
    assert attribute(refused).source == "agent" and values(refused)["policy_compliance"] == L  # refused what is allowed
    forbidden = (
        Run()
        .user("cancel ABC123 and XYZ789, plans changed")
        .call("get_user_details", USER, user_id="ana_1")
        .call("get_reservation_details", booking("ABC123", **old), reservation_id="ABC123")
        .call("get_reservation_details", booking("XYZ789", **old), reservation_id="XYZ789")
        .say("Cancel ABC123 for a full refund?")
        .user("yes")
        .call("cancel_reservation", booking("ABC123", **old), reservation_id="ABC123")
    )
    own = attribute(
        forbidden.trajectory([cancel("XYZ789")], [False])
    )  # the gold breaks the policy, and so did the agent
    assert own.source == "agent" and "forbids" in own.reason and "ABC123" in own.evidence.quote
    misread = (
        Run()
        .user("cancel ABC123, plans changed")
        .call("get_user_details", USER, user_id="ana_1")
        .call("get_reservation_details", booking("ABC123", **old), reservation_id="ABC123")
        .call("get_reservation_details", "Error: Reservation ana_1 not found", error=True, reservation_id="ana_1")
        .say("ABC123 was booked over 24 hours ago in economy without insurance, so the policy does not allow a refund.")
        .user("Fine. ###STOP###")
    )
    erred = attribute(
        misread.trajectory([cancel("ABC123")], [False])
    )  # the gold is wrong, but the agent erred on its own
    assert erred.source == "agent"


def test_a_transfer_is_judged_by_whether_the_policy_calls_for_it_not_by_the_users_request() -> None:
    def transferred(user_text: str, success: bool = True) -> LabelValue:
        run = (
            looked_up("ABC123")
            .user(user_text)
            .call("transfer_to_human_agents", "Transfer successful", summary="x")
            .say("YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.")
        )
        return values(run.trajectory([], [], success=success))["policy_compliance"]

    assert transferred("Please connect me to a human agent.") == L  # labels/transfer_amendment.md
    assert transferred("What is my balance?") == L

    def gold_transferred(domain: str) -> LabelValue:
        run = (
            Run(domain, policy="")
            .user("Change my flight's destination to LAS.")
            .say("A destination cannot be changed.")
            .user("Then I want a human.")
            .call("transfer_to_human_agents", "Transfer successful", summary="x")
        )
        gold = [{"name": "transfer_to_human_agents", "arguments": {"summary": "x"}}]
        return values(run.trajectory(gold, [True], success=True))["policy_compliance"]

    # a gold transfer after a refusal does not make one called for where the policy's rules are
    # checks (airline task 13, retail 12 and 26: labels/round5_brief.md); a workflow's procedure ends
    # in one; with no rules encoded (a domain the package does not know) the gold is the evidence
    assert gold_transferred("airline") == L and gold_transferred("telecom") == P and gold_transferred("bookshop") == P
    flown = (
        Run()
        .user("Cancel ABC123, please.")
        .call("get_reservation_details", booking("ABC123", date="2024-05-10"), reservation_id="ABC123")
        .call("transfer_to_human_agents", "Transfer successful", summary="flown")
        .trajectory([cancel("ABC123")], [False])
    )
    assert values(flown)["policy_compliance"] == P  # gold cancels a flown reservation: the policy sends it to a human


def test_a_required_transfer_never_made_leaves_a_workflows_last_step_undone() -> None:
    def stopped(domain: str) -> dict[str, LabelValue]:
        run = (
            Run(domain, policy="")
            .user("My line is suspended.")
            .call("resume_line", {"ok": True}, customer_id="C1", line_id="L1")
        )
        transfer = {"name": "transfer_to_human_agents", "arguments": {"summary": "x"}}
        return values(run.say("Your line is active again.").trajectory([transfer], [False], success=False))

    # the escalation left out is work left undone, not a rule broken (the readers: the missing
    # escalation "is labelled under multi_step_task_completion"; outside a workflow a refusal the
    # gold would have transferred complies)
    assert stopped("telecom")["policy_compliance"] == P and stopped("telecom")["multi_step_task_completion"] == L
    assert stopped("airline")["policy_compliance"] == P and stopped("airline")["multi_step_task_completion"] != L


def test_every_telecom_run_needs_its_preconditions_checked() -> None:
    """labels/telecom_precondition_amendment.md: each telecom fix or escalation depends on the state,
    whoever makes the change (the agent alone, or the user it guides), so the capability is never NA there."""

    def checked(with_user: bool, change: bool) -> LabelValue:
        run = Run("telecom", policy="")
        if with_user:
            run.user("My mobile data does not work.")
        run.call("check_network_status", {"airplane_mode": True})
        if change:
            run.call("toggle_airplane_mode", {"airplane_mode": False})
        return values(run.say("Done.").trajectory([], [], success=True))["precondition_verification"]

    assert {checked(with_user, change) for with_user in (False, True) for change in (False, True)} == {P}
    assert (
        values(
            Run("mock", policy="")
            .user("Where is my order?")
            .call("get_order", {"status": "shipped"})
            .say("It has shipped.")
            .trajectory([], [], success=True)
        )["precondition_verification"]
        == N
    )


def test_a_suspension_lifted_after_the_contract_ended_is_a_condition_left_unchecked() -> None:
    """labels/telecom_resume_amendment.md: a line resumed although its record showed the contract
    ended is policy_compliance LACKING and, unless the agent had said the contract ended,
    precondition_verification LACKING too; a bill shown paid by the payment's own confirmation is paid."""

    def resumed(contract_end: str, said: str = "Your bill is paid.") -> dict[str, LabelValue]:
        line = {
            "line_id": "L2",
            "phone_number": "555-123-2002",
            "status": "Suspended",
            "contract_end_date": contract_end,
        }
        bill = {"bill_id": "B1", "status": "Overdue", "total_due": 65.0}
        lifting = next(rule.policy for rule in telecom.DOMAIN.action_rules if rule.tools == {"resume_line"})
        policy = f"The current time is 2025-02-25 12:08:00 EST.\n{lifting}"
        run = (
            Run("telecom", policy=policy)
            .user("My line 555-123-2002 is suspended.")
            .call("get_customer_by_phone", CUSTOMER, phone_number="555-123-2002")
            .call("get_details_by_id", line, id="L2")
            .call("get_bills_for_customer", [bill], customer_id="C1")
            .call("send_payment_request", "Payment request sent", customer_id="C1", bill_id="B1")
            .call("make_payment", "Payment of 65.0 USD has been made for bill B1.")
            .say(said)
            .call("resume_line", {**line, "status": "Active"}, customer_id="C1", line_id="L2")
        )
        return values(run.trajectory([], [], success=False))

    assert resumed("2026-12-31")["precondition_verification"] == P
    assert resumed("2025-01-31")["precondition_verification"] == L and resumed("2025-01-31")["policy_compliance"] == L
    knew = resumed(
        "2025-01-31", said="Your bill is paid; your contract ended on 2025-01-31, but I'll resume the line anyway."
    )
    assert knew["precondition_verification"] == P and knew["policy_compliance"] == L


def test_the_user_stopping_before_the_agent_could_act_is_the_user_simulators() -> None:
    proposal = looked_up("ABC123").say("Shall I cancel ABC123 for a full refund?")
    gold = [cancel("ABC123")]
    left = proposal.user("Yes please.###STOP###").trajectory(gold, [False])
    assert attribute(left).source == "user_simulator" and values(left)["multi_step_task_completion"] == N
    assert attribute(Run().user("###STOP###").trajectory(gold, [False])).source == "user_simulator"
    closing = (
        looked_up("ABC123")
        .say("Is there anything else I can help you with?")
        .user("No. ###STOP###")
        .trajectory(gold, [False])
    )
    assert attribute(closing).source == "agent" and values(closing)["multi_step_task_completion"] == L

    def transfer_accepted(wanted: list[dict]) -> str:
        return attribute(
            looked_up("ABC123")
            .say("ABC123 cannot be cancelled. Would you like me to transfer you to a human agent?")
            .user("Yes, please. ###TRANSFER###")
            .trajectory(wanted, [False] * len(wanted))
        ).source

    assert transfer_accepted(gold) == "agent"  # the agent had given the cancellation up: the stop cut nothing
    assert transfer_accepted([{"name": "transfer_to_human_agents", "arguments": {"summary": "x"}}]) == "user_simulator"


def test_a_domain_the_rules_do_not_know_gets_the_generic_checks() -> None:
    run = (
        Run("bank", policy="Be nice.")
        .user("move 10 to savings")
        .call("get_account", {"account_id": "A1"}, account_id="A1")
        .call("transfer_funds", {"ok": True}, account_id="A1", amount=10)
        .call("transfer_funds", {"ok": True}, account_id="A1", amount=10)
        .call("transfer_funds", {"ok": True}, account_id="A1", amount=10)
    )
    gold = [
        {"name": "transfer_funds", "arguments": {"account_id": "A1", "amount": 10}},
        {"name": "close_account", "arguments": {"account_id": "A1"}},
    ]
    verdicts = values(run.trajectory(gold, [True, False]))
    assert (
        verdicts["multi_step_task_completion"] == L and verdicts["tool_calling_precision"] == P
    )  # never closed; no wrong call
    assert verdicts["precondition_verification"] == P  # no confirmation rule without a known policy


def test_contrast_pairs_and_all_fail_tasks() -> None:
    a, b, c, d = (
        Run().user(t).trajectory([], [], success=s, task=k, agent=g)
        for t, s, k, g in (
            ("x", True, "1", "a"),
            ("y", False, "1", "b"),
            ("z", False, "2", "a"),
            ("w", False, "2", "b"),
        )
    )
    pairs = contrast([a, b, c, d])
    assert [(p.task, p.pairs) for p in pairs] == [("tau2-airline:1", [(a.id, b.id)])]
    assert [e["task"] for e in failing_for_every_agent([a, b, c, d])] == ["tau2-airline:2"]
    assert failing_for_every_agent([c]) == []  # one agent is not evidence of a benchmark error


@pytest.fixture(scope="module")
def airline_runs(shared_data: Path):
    folder = shared_data / "tau2" / "results" / "airline"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    trajectories = ingest_paths([folder]).trajectories
    return trajectories, diagnose(trajectories, [folder])


def test_airline_selects_policy_capabilities_with_intervals(airline_runs) -> None:
    _, diagnosis = airline_runs
    report = diagnosis.report
    # The careful reading of the 282 airline runs (labels/reference.json) selects these four, each with Δ >= 0.38 over
    # the failures it blames on the agent; not policy_compliance (Δ 0.17: successes break the policy nearly as often).
    assert {
        "precondition_verification",
        "structured_data_reasoning",
        "tool_calling_precision",
        "multi_step_task_completion",
    } <= set(report.selected), report.selected
    assert len(PAPER_TAU_CAPABILITIES.intersection(report.selected)) >= 3, report.selected
    for stats in report.capabilities:
        if stats.selected:
            low, high = stats.delta_ci
            assert low <= stats.delta_mean <= high and low > 0 and stats.cov[0] >= 0.1
            assert stats.explained_failures and all(e["evidence"] for e in stats.explained_failures)
    assert 0 < report.union_coverage <= 1


def test_airline_benchmark_blame_comes_from_gold_that_breaks_the_policy(airline_runs) -> None:
    trajectories, diagnosis = airline_runs
    blamed = [s for s in diagnosis.sources.values() if s.source == "benchmark"]
    assert {s.reason for s in blamed} == {"gold action breaks the policy", "gold action corrected by the benchmark"}
    by_id = {t.id: t for t in trajectories}
    tasks = {by_id[s.trajectory_id].task_id for s in blamed}
    assert {"33", "37", "39", "44"} <= tasks  # gold against the bag allowance, flown or ineligible cancellations
    grouped = [e for e in diagnosis.report.possible_benchmark_errors if "failures_attributed_to_benchmark" in e]
    assert (
        sum(e["failures_attributed_to_benchmark"] for e in grouped)
        == len(blamed)
        == diagnosis.report.failure_sources["benchmark"]
    )
    counted = {e["trajectory_id"] for s in diagnosis.report.capabilities for e in s.explained_failures}
    assert not counted & {s.trajectory_id for s in blamed}


def test_agreement_with_careful_reading_on_the_tune_half(shared_data: Path) -> None:
    """Regression guard on the half the detectors were tuned on (the test half is the benchmark's)."""
    if not (shared_data / "tau2" / "results").is_dir():
        pytest.skip("τ² runs absent")
    bench = load_benchmark("diagnosis_agreement")
    items = bench.load_items("tune", shared_data)
    diagnosis = diagnose([i.trajectory for i in items], [])
    voted = bench.voted_values(diagnosis)
    for name in detect(items[0].trajectory):
        pairs = [(i.entry["labels"][name]["label"], voted[(i.trajectory.id, name)].value.value) for i in items]
        assert bench.kappa(pairs) >= 0.55, name
    sources = [
        (i.entry["failure_source"], diagnosis.sources[i.trajectory.id].source)
        for i in items
        if not i.trajectory.success and i.entry["failure_source"]
    ]
    assert bench.kappa(sources) >= 0.7
    assert bench.kappa([("a", "a"), ("b", "b"), ("a", "b")]) == pytest.approx(0.4)
    assert bench.kappa([("a", "a"), ("a", "a")]) is None


def test_kappa_intervals_resample_the_same_items_for_every_labelling() -> None:
    bench = load_benchmark("diagnosis_agreement")
    reference = ["L", "P", "P", "N", "L", "P", "P", "L"] * 5
    good = list(zip(reference, reference))
    fair = list(zip(reference, ["L", "P", "L", "N", "P", "P", "P", "L"] * 5))
    samples = bench.bootstrap_kappas([good, fair, fair], resamples=500)
    assert samples.shape == (500, 3) and np.allclose(samples[:, 0], 1)
    assert (samples[:, 1] == samples[:, 2]).all()  # the same resampled items, so a paired difference of 0
    low, high = bench.interval(samples[:, 1])
    assert low < bench.kappa(fair) < high < 1
    one_class = bench.bootstrap_kappas([[("P", "P")] * 4], resamples=10)
    assert np.isnan(one_class).all() and bench.interval(one_class[:, 0]) is None
    assert bench.kappa_with_interval(fair).startswith(f"{bench.kappa(fair):+.2f} [")


def test_folds_deal_whole_run_files_largest_first() -> None:
    bench = load_benchmark("diagnosis_agreement")
    entries = [
        {"run_file": f"airline/{name}.json", "labels": {"policy_compliance": {"label": label}}}
        for name, label in (
            ("a", "PRESENT"),
            ("a", "LACKING"),
            ("a", "PRESENT"),
            ("b", "LACKING"),
            ("b", "PRESENT"),
            ("c", "NA"),
        )
    ]
    items = [bench.Item(e, Run().user(str(n)).trajectory([], [], task=str(n))) for n, e in enumerate(entries)]
    voted = {
        (items[1].trajectory.id, "policy_compliance"): Label(
            trajectory_id=items[1].trajectory.id, capability="policy_compliance", value=LabelValue.LACKING, labeller="x"
        )
    }
    head, row = bench.fold_agreement(items, voted, ["policy_compliance"], 2)
    assert "fold 0 (4)" in head and "fold 1 (2)" in head  # a (3) and c (1) together, b (2) alone
    assert row.split()[1:] == [
        "+0.33",
        "+0.00",
    ]  # fold 0: a's LACKING found, two PRESENT missed; fold 1: b's LACKING missed


def test_a_second_reading_is_compared_with_the_reference_and_the_labeller(tmp_path: Path, monkeypatch) -> None:
    bench = load_benchmark("diagnosis_agreement")
    labels = ("PRESENT", "LACKING", "PRESENT", "LACKING")
    entries = [
        {
            "run_file": "airline/a.json",
            "sim_id": str(n),
            "failure_source": None,
            "labels": {"policy_compliance": {"label": label}},
        }
        for n, label in enumerate(labels)
    ]
    items = [
        bench.Item(e, Run().user(str(n)).trajectory([], [], task=str(n), success=True)) for n, e in enumerate(entries)
    ]
    second = [
        {
            **e,
            "labels": {
                "policy_compliance": {"label": "PRESENT" if n == 3 else e["labels"]["policy_compliance"]["label"]}
            },
        }
        for n, e in enumerate(entries[1:], start=1)
    ]  # the first is not read again; the last read otherwise
    monkeypatch.setattr(bench, "SECOND", tmp_path / "second.json")
    assert bench.reader_agreement(items, {}, ["policy_compliance"]) == []  # no second reading: nothing to print
    bench.SECOND.write_text(json.dumps(second))
    head, row, sources = bench.reader_agreement(items, {}, ["policy_compliance"])
    assert "second reading of 3 of these" in head
    assert row.split()[1:] == ["+0.40", "+0.00", "+0.00"]  # the labeller gave nothing (NA): no better than chance
    assert "0/0 agree" in sources


def test_gold_the_benchmark_corrected_blames_it_only_for_runs_graded_on_it(shared_data: Path) -> None:
    domains = shared_data / "tau2" / "domains"
    for domain in corrections.CORRECTIONS:
        if not (domains / domain / "tasks_v0.2.0.json").is_file():
            pytest.skip(f"{domains / domain} is absent")
        old, new = (json.loads((domains / domain / name).read_text()) for name in ("tasks_v0.2.0.json", "tasks.json"))
        assert (
            corrections.corrections_between(old, new) == corrections.CORRECTIONS[domain]
        )  # the table is the data's own diff
    airline_old = {str(t["id"]): t for t in json.loads((domains / "airline" / "tasks_v0.2.0.json").read_text())}
    stale = next(
        a
        for a in airline_old["9"]["evaluation_criteria"]["actions"]
        if corrections.fingerprint(a["name"], a["arguments"]) in corrections.CORRECTIONS["airline"]["9"]["stale"]
    )
    run = Run().user("cancel NQNU5R please").say("Could you tell me why?").user("Plans changed.")
    old_gold = run.trajectory([stale], [False], task="9")
    assert attribute(old_gold).reason == "gold action corrected by the benchmark"
    erred = (
        Run()
        .user("cancel NQNU5R please")
        .call("get_reservation_details", "Error: Reservation ana_1 not found", error=True, reservation_id="ana_1")
        .say("Could you tell me why?")
        .user("Plans changed.")
    )
    assert (
        attribute(erred.trajectory([stale], [False], task="9")).source == "agent"
    )  # the gold is stale, but the agent erred too
    assert (
        attribute(run.trajectory([{**stale, "arguments": {"reservation_id": "OTHER1"}}], [False], task="9")).source
        == "agent"
    )
    # Task 7's stale flight change was replaced by another one: an agent that made neither fails the corrected set too.
    replaced = next(
        a
        for a in airline_old["7"]["evaluation_criteria"]["actions"]
        if corrections.fingerprint(a["name"], a["arguments"]) in corrections.CORRECTIONS["airline"]["7"]["stale"]
    )
    idle = (
        Run()
        .user("change my flights please")
        .say("Which reservation?")
        .user("The one to Boston.")
        .say("I cannot find it.")
    )
    assert attribute(idle.trajectory([replaced], [False], task="7")).source == "agent"
