"""The arguments of the agent's calls on hand-built runs: what a wrong one shows (tool-calling precision,
data reasoning for a misread allowance, both for a record chosen by misreading) and what is no error at all."""

from __future__ import annotations

from tau_runs import USER, L, N, P, Run, booking, looked_up, quotes, values

from tracegym.schema import LabelValue, Trajectory

FLIGHT = {"flight_number": "HAT002", "date": "2024-05-21"}
USER_PASSENGER = [{"first_name": "Ana", "last_name": "Diaz", "dob": "1990-01-01"}]


def changed(flight: dict) -> dict:
    """Values of a run that moves ABC123 to `flight` after the user's yes; τ² recorded the gold's
    flight change as unmatched (it compares the call's arguments whole)."""
    arguments = {"reservation_id": "ABC123", "cabin": "economy", "flights": [flight], "payment_id": "credit_card_1"}
    run = (
        looked_up("ABC123")
        .user("Please move ABC123 to HAT002 on May 21.")
        .call(
            "search_direct_flight",
            [{**FLIGHT, "origin": "JFK", "destination": "LAX", "price": 210}],
            origin="JFK",
            destination="LAX",
            date="2024-05-21",
        )
        .say("I'll move ABC123 to HAT002 on 2024-05-21, paying the $10 difference with your visa 4321. Proceed?")
        .user("yes")
        .call("update_reservation_flights", {"reservation_id": "ABC123"}, **arguments)
    )
    gold = [{"name": "update_reservation_flights", "arguments": {**arguments, "flights": [FLIGHT]}}]
    return values(run.trajectory(gold, [False]))


def test_fields_the_gold_does_not_name_are_no_wrong_argument() -> None:
    extra = changed({**FLIGHT, "origin": "JFK", "destination": "LAX", "price": 210})
    assert extra["tool_calling_precision"] == P and extra["structured_data_reasoning"] == P
    assert changed({**FLIGHT, "date": "2024-05-22"})["tool_calling_precision"] == L


def test_the_same_correct_call_repeated_is_no_imprecision() -> None:
    def repeated(name: str, **arguments) -> dict:
        run = looked_up("ABC123").user("Can you help me with ABC123?")
        for _ in range(4):
            run.call(
                name,
                "Transfer successful" if name == "transfer_to_human_agents" else booking("ABC123", bags=1),
                **arguments,
            )
        return values(run.say("Done.").trajectory([], [], success=False))

    assert repeated("get_reservation_details", reservation_id="ABC123")["tool_calling_precision"] == P
    assert repeated("transfer_to_human_agents", summary="help")["tool_calling_precision"] == P
    assert (
        repeated(
            "update_reservation_baggages",
            reservation_id="ABC123",
            total_baggages=2,
            nonfree_baggages=1,
            payment_id="credit_card_1",
        )["tool_calling_precision"]
        == P
    )


def test_a_write_to_another_line_than_the_users_is_a_wrong_record_chosen_by_misreading() -> None:
    def roaming_enabled_on_l1(with_user: bool) -> dict:
        lines = {"L1": "555-123-2001", "L2": "555-123-2002"}
        run = Run("telecom", policy="")
        if with_user:  # else a solo run: its ticket named the number the agent looks the customer up by
            run.user("My data does not work abroad; my number is 555-123-2002.")
        run.call("get_customer_by_phone", {"customer_id": "C1", "line_ids": list(lines)}, phone_number="555-123-2002")
        for line, number in lines.items():
            run.call("get_details_by_id", {"line_id": line, "phone_number": number, "roaming_enabled": False}, id=line)
        return values(
            run.call("enable_roaming", {"line_id": "L1", "roaming_enabled": True}, customer_id="C1", line_id="L1")
            .say("Roaming is enabled on your line.")
            .trajectory([], [], success=False)
        )

    for verdicts in (roaming_enabled_on_l1(with_user=True), roaming_enabled_on_l1(with_user=False)):
        assert (
            verdicts["structured_data_reasoning"] == L and verdicts["tool_calling_precision"] == L
        )  # labels/round5_brief.md


def test_paid_bags_outside_every_allowance_are_a_misreading_and_a_wrong_count_even_with_the_profile_unread() -> None:
    def run(nonfree: int, bags: int = 1) -> Trajectory:
        return (
            Run()
            .user("Add a checked bag to ABC123, please.")
            .call("get_reservation_details", booking("ABC123"), reservation_id="ABC123")
            .say(f"I'll add {bags} checked bag to ABC123, charged to your visa 4321. Proceed?")
            .user("yes")
            .call(
                "update_reservation_baggages",
                booking("ABC123", bags=bags),
                reservation_id="ABC123",
                total_baggages=bags,
                nonfree_baggages=nonfree,
                payment_id="credit_card_1",
            )
        ).trajectory([], [], success=True)

    def added(nonfree: int, bags: int = 1) -> dict:
        return values(run(nonfree, bags))

    assert added(1)["structured_data_reasoning"] == L  # every membership gives an economy passenger one free bag
    assert "to pay" in quotes(run(1), "tool_calling_precision")  # and the count in the call is wrong (GUIDE.md: counts)
    assert "to pay" not in quotes(run(0), "tool_calling_precision")
    assert added(1, bags=2)["structured_data_reasoning"] == P  # a regular member pays for the second


def test_bags_added_after_the_agents_own_cabin_change_get_the_new_cabins_allowance() -> None:
    gold = {**USER, "membership": "gold"}

    def added(nonfree: int, upgrade: bool) -> LabelValue:
        run = (
            Run()
            .user("I'm ana_1. Please move ABC123 to economy and add 3 checked bags.")
            .call("get_user_details", gold, user_id="ana_1")
            .call("get_reservation_details", booking("ABC123", cabin="basic_economy"), reservation_id="ABC123")
            .say("I'll change ABC123 to economy and add 3 bags, charged to your visa 4321. Proceed?")
            .user("yes")
        )
        if upgrade:
            run.call(
                "update_reservation_flights",
                booking("ABC123"),
                reservation_id="ABC123",
                cabin="economy",
                flights=[{"flight_number": "HAT001", "date": "2024-05-20"}],
                payment_id="credit_card_1",
            )
        run.call(
            "update_reservation_baggages",
            booking("ABC123", bags=3),
            reservation_id="ABC123",
            total_baggages=3,
            nonfree_baggages=nonfree,
            payment_id="credit_card_1",
        )
        return values(run.trajectory([], [], success=True))["structured_data_reasoning"]

    assert added(1, upgrade=True) == L  # a gold member in economy has 3 free bags, not basic economy's 2
    assert added(0, upgrade=True) == P
    assert added(1, upgrade=False) == P


def test_bags_the_user_declined_are_a_rule_broken_and_a_count_no_one_gave() -> None:
    def booked(said: str) -> dict:
        arguments = {
            "user_id": "ana_1",
            "origin": "JFK",
            "destination": "LAX",
            "flight_type": "one_way",
            "cabin": "economy",
            "flights": [{"flight_number": "HAT001", "date": "2024-05-20"}],
            "passengers": USER_PASSENGER,
            "payment_methods": [{"payment_id": "credit_card_1", "amount": 200}],
            "total_baggages": 1,
            "nonfree_baggages": 0,
            "insurance": "no",
        }
        run = (
            Run()
            .user(f"I'm ana_1 and I want a flight JFK to LAX on May 20. {said}")
            .call("get_user_details", USER, user_id="ana_1")
            .say("I'll book HAT001 on 2024-05-20 in economy with 1 checked bag, $200 on your visa 4321. Shall I?")
            .user("yes")
            .call("book_reservation", booking("NEW001", bags=1), **arguments)
        )
        return values(run.trajectory([], [], success=True))

    declined = booked("I don’t need travel insurance or any extra baggage.")
    assert declined["policy_compliance"] == L and declined["tool_calling_precision"] == L
    wanted = booked("I don't need insurance, but I'll bring a bag.")
    assert wanted["policy_compliance"] == P and wanted["tool_calling_precision"] == P


def test_a_cancellation_made_again_after_it_succeeded_is_imprecision_a_repeated_update_is_not() -> None:
    def twice(name: str, **arguments) -> LabelValue:
        run = looked_up("ABC123").say("Cancel ABC123 for a full refund to your visa 4321?").user("yes")
        for _ in range(2):
            run.call(name, booking("ABC123"), reservation_id="ABC123", **arguments)
        return values(run.trajectory([], [], success=False))["tool_calling_precision"]

    assert twice("cancel_reservation") == L  # each cancellation refunds again
    assert twice("update_reservation_baggages", total_baggages=1, nonfree_baggages=0, payment_id="credit_card_1") == P


def test_a_write_refused_for_its_own_arguments_is_imprecision_one_refused_for_the_state_a_precondition() -> None:
    def refused(error: str) -> dict:
        run = (
            looked_up("ABC123")
            .user("Please add two bags to ABC123 and pay with my gift card.")
            .say("I'll add 2 checked bags to ABC123, one free and one for $50 from gift card 9. Proceed?")
            .user("yes")
            .call(
                "update_reservation_baggages",
                error,
                error=True,
                reservation_id="ABC123",
                total_baggages=2,
                nonfree_baggages=1,
                payment_id="gift_card_9",
            )
        )
        return values(run.say("Sorry, that did not work.").trajectory([], [], success=False))

    added_up = refused("Error: Payment amount does not add up, total price is 50, but paid 40")
    assert added_up["tool_calling_precision"] == L and added_up["precondition_verification"] == P
    balance = refused("Error: Gift card balance is not enough")
    assert balance["tool_calling_precision"] == P and balance["precondition_verification"] == L


def test_a_payment_that_did_not_add_up_is_a_miscomputed_amount_even_when_redone() -> None:
    def bags_paid(first_error: str) -> dict:
        arguments = dict(reservation_id="ABC123", total_baggages=2, nonfree_baggages=1, payment_id="gift_card_9")
        run = (
            looked_up("ABC123")
            .user("Please add two bags to ABC123 and pay with my gift card.")
            .say("I'll add 2 checked bags to ABC123, one free and one for $40 from gift card 9. Proceed?")
            .user("yes")
            .call("update_reservation_baggages", first_error, error=True, **arguments)
            .call("update_reservation_baggages", booking("ABC123", bags=2), **arguments)
        )
        return values(run.say("Done: two bags added.").trajectory([], [], success=True))

    miscomputed = bags_paid("Error: Payment amount does not add up, total price is 50, but paid 40")
    assert miscomputed["structured_data_reasoning"] == L and miscomputed["tool_calling_precision"] == L
    not_found = bags_paid("Error: Reservation not found")
    assert not_found["structured_data_reasoning"] == P
    assert not_found["tool_calling_precision"] == L  # rejected for its own arguments: redone or not (round5_brief.md)
    assert bags_paid("Error: Gift card balance is not enough")["tool_calling_precision"] == P  # refused for the state


def test_speaking_of_a_kind_of_payment_method_the_profile_does_not_hold_is_a_misreading() -> None:
    def said(text: str, methods: tuple[str, ...] = ("paypal_1",)) -> dict:
        profile = {
            "user_id": "ana_1",
            "payment_methods": {m: {"source": m.rsplit("_", 1)[0], "id": m} for m in methods},
        }
        run = (
            Run("retail", policy="")
            .user("I want to exchange my boots.")
            .call("get_user_details", profile, user_id="ana_1")
            .say(text)
        )
        return values(run.trajectory([], [], success=True))

    assert said("I'll use your gift card for any price difference.")["structured_data_reasoning"] == L
    assert (
        said("You can pick your original method or your existing PayPal gift card.")["structured_data_reasoning"] == L
    )
    assert said("I'll use your gift card.", ("gift_card_2",))["structured_data_reasoning"] == P
    assert said("I'll charge your PayPal account.")["structured_data_reasoning"] == P
    assert said("I cannot use your gift card, as none is on file.")["structured_data_reasoning"] == P  # negated


def test_a_tool_call_written_out_as_text_is_imprecision() -> None:
    def answered(text: str) -> dict:
        run = Run().user("Please remove the insurance from ABC123.").say(text).user("My user id is ana_1.")
        return values(run.say("Sorry, I cannot do that.").trajectory([], [], success=False))

    written = answered('{\n  "name": "get_user_details",\n  "arguments": {"user_id": "sara_doe_496"}\n}')
    assert written["tool_calling_precision"] == L
    assert answered("Could you give me your user id, please?")["tool_calling_precision"] == N  # no call made or needed


def test_a_url_no_output_gave_is_an_invented_value_in_any_call() -> None:
    def configured(shown: str) -> dict:
        run = (
            Run("telecom", policy="")
            .user("My picture messages fail.")
            .call("check_apn_settings", {"apn_name": "internet", "mmsc_url": shown})
            .call(
                "set_apn_settings",
                "APN settings updated",
                apn_settings={"apn_name": "internet", "mmsc_url": "http://mms.carrier.com/mms/wapenc"},
            )
        )
        return values(run.say("Your MMS settings are fixed.").trajectory([], [], success=False))

    assert configured("Not Set")["tool_calling_precision"] == L
    assert configured("http://mms.carrier.com/mms/wapenc")["tool_calling_precision"] == P


def test_an_id_of_another_kind_the_system_rejects_is_imprecision() -> None:
    def looked_up_status(flight_number: str) -> dict:
        run = (
            Run()
            .user("My flight on ABC123 was delayed; I'm ana_1.")
            .call("get_user_details", USER, user_id="ana_1")
            .call(
                "get_flight_status",
                f"Error: Flight {flight_number} not found",
                error=True,
                flight_number=flight_number,
                date="2024-05-14",
            )
            .say("I could not find that flight.")
        )
        return values(run.trajectory([], [], success=False))

    assert looked_up_status("ABC123")["tool_calling_precision"] == L  # a reservation code as a flight number
    assert looked_up_status("XYZ789")["tool_calling_precision"] == L
    user_as_reservation = (
        Run()
        .user("I'm ana_1.")
        .call("get_user_details", USER, user_id="ana_1")
        .call("get_reservation_details", "Error: Reservation ana_1 not found", error=True, reservation_id="ana_1")
    )
    assert values(user_as_reservation.trajectory([], [], success=False))["tool_calling_precision"] == L
    same_kind = (
        Run()
        .user("I'm ana_1.")
        .call("get_user_details", USER, user_id="ana_1")
        .call("get_reservation_details", "Error: Reservation XYZ789 not found", error=True, reservation_id="XYZ789")
    )
    assert values(same_kind.trajectory([], [], success=False))["tool_calling_precision"] == P


def test_an_id_the_user_named_of_another_kind_and_the_system_rejects_is_imprecision() -> None:
    def tried(said: str) -> LabelValue:
        run = (
            Run()
            .user(said)
            .call("get_reservation_details", "Error: Reservation ana_1 not found", error=True, reservation_id="ana_1")
            .user("Try XYZ789.")
            .call("get_reservation_details", booking("XYZ789"), reservation_id="XYZ789")
        )
        return values(run.trajectory([], [], success=False))["tool_calling_precision"]

    assert tried("Yes, my user ID is ana_1.") == L  # the records file user ids (XYZ789's user_id), so "user" is a kind
    assert tried("My user_id: ana_1") == L
    assert tried("My confirmation number is ana_1.") == P  # no record holds a confirmation_id: no kind named
    assert tried("It is ana_1.") == P
