"""What the agent says, checked against the records and the policy: amounts it states, settings it
calls fine, offers and promises the policy does not support (airline), on hand-built runs."""

from __future__ import annotations

from tau_runs import USER, L, P, Run, booking, values

from tracegym.schema import LabelValue

OLD = {"created": "2024-05-01T10:00:00"}  # booked over 24 hours before the policy's "now"


def test_a_charge_stated_that_the_write_did_not_make_is_data_reasoning() -> None:
    paid = [{"payment_id": "credit_card_1", "amount": 200}]

    def upgraded(said: str, charged: float) -> LabelValue:
        record = {**booking("ABC123"), "payment_history": paid}
        run = (
            Run()
            .user("Upgrade ABC123 to business please.")
            .call("get_user_details", USER, user_id="ana_1")
            .call("get_reservation_details", record, reservation_id="ABC123")
            .say(f"Upgrading ABC123 to business: {said}, charged to your visa 4321. Proceed?")
            .user("yes")
            .call(
                "update_reservation_flights",
                {
                    **record,
                    "cabin": "business",
                    "payment_history": paid + [{"payment_id": "credit_card_1", "amount": charged}],
                },
                reservation_id="ABC123",
                cabin="business",
                flights=[{"flight_number": "HAT001", "date": "2024-05-20"}],
                payment_id="credit_card_1",
            )
        )
        return values(run.trajectory([], [], success=True))["structured_data_reasoning"]

    assert upgraded("the fare difference is $150", 150) == P
    assert upgraded("the fare difference is $75 per passenger", 150) == P  # a share of the charge
    assert upgraded("the fare difference is $75", 150) == L  # a share stated as the whole
    assert upgraded("the fare difference is $120", 150) == L
    assert upgraded("the business fare is $350", 150) == P  # a fare, not a charge: nothing stated to compare
    assert upgraded("difference: $350 - $200 = $150", 150) == P  # the charge is the sum's result
    assert upgraded("$150 charged; your card's balance after the charge: $71", 150) == P  # named before its keyword


def test_a_total_stated_over_several_writes_is_checked_against_their_charges_together() -> None:
    def upgraded_both(summary: str) -> LabelValue:
        run = (
            Run().user("Upgrade ABC123 and XYZ789 to business please.").call("get_user_details", USER, user_id="ana_1")
        )
        for rid in ("ABC123", "XYZ789"):
            record = {**booking(rid), "payment_history": [{"payment_id": "credit_card_1", "amount": 200}]}
            run.call("get_reservation_details", record, reservation_id=rid)
        run.say("Upgrade both to business, charged to your visa 4321. Proceed?").user("yes")
        for rid, charged in (("ABC123", 150), ("XYZ789", 90)):
            history = [
                {"payment_id": "credit_card_1", "amount": 200},
                {"payment_id": "credit_card_1", "amount": charged},
            ]
            run.call(
                "update_reservation_flights",
                {**booking(rid), "cabin": "business", "payment_history": history},
                reservation_id=rid,
                cabin="business",
                flights=[{"flight_number": "HAT001", "date": "2024-05-20"}],
                payment_id="credit_card_1",
            )
        run.say(summary)
        return values(run.trajectory([], [], success=True))["structured_data_reasoning"]

    assert upgraded_both("Done! Your total upgrade charges of $240 have been applied.") == P
    assert upgraded_both("Done! Your total upgrade charges of $225 have been applied.") == L
    assert upgraded_both("Done! Charges of $150 and $90 have been applied.") == P


def test_a_telecom_status_read_wrongly_is_data_reasoning() -> None:
    line = {
        "line_id": "L2",
        "phone_number": "555-123-2002",
        "plan_id": "P2",
        "data_used_gb": 15.1,
        "data_refueling_gb": 0.0,
        "roaming_enabled": True,
    }
    plan = {"plan_id": "P2", "data_limit_gb": 15.0, "data_refueling_price_per_gb": 2.0}

    def run(
        status: str, summary: str, refuel: bool = False, said: str = "Please make sure roaming is on."
    ) -> dict[str, LabelValue]:
        steps = (
            Run("telecom", policy="")
            .user("MMS fails abroad, my number is 555-123-2002.")
            .call("get_details_by_id", line, id="L2")
            .call("get_details_by_id", plan, id="P2")
            .call("check_network_status", f"Airplane Mode: OFF\nData Roaming Enabled: {status}")
            .say(said)
        )
        if refuel:
            steps.call("refuel_data", {**line, "data_refueling_gb": 2.0}, customer_id="C1", line_id="L2", gb_amount=2.0)
        steps.call("transfer_to_human_agents", "Transfer successful", summary=summary)
        return values(steps.trajectory([], [], success=False))

    assert (
        run("No", "MMS fails; roaming is enabled and the APN was reset.", refuel=True)["structured_data_reasoning"] == L
    )
    assert (
        run("Yes", "MMS fails; roaming is enabled and the APN was reset.", refuel=True)["structured_data_reasoning"]
        == P
    )
    assert (
        run("No", "MMS fails; the APN was reset.", refuel=True)["structured_data_reasoning"] == P
    )  # an instruction is no claim
    assert (
        run("Yes", "MMS fails; the APN was reset.")["structured_data_reasoning"] == P
    )  # 15.1 GB of 15 GB unrefuelled: nothing misread


def test_a_refuel_left_undone_is_a_step_left_not_a_misreading_whether_or_not_the_plans_limit_was_read() -> None:
    """labels/round5_brief.md: a usage never compared is no data reasoning; the readers of
    labels/data_reasoning_amendment.md held the same of a usage and a limit both read, never compared."""
    line = {
        "line_id": "L2",
        "phone_number": "555-123-2002",
        "plan_id": "P2",
        "data_used_gb": 15.1,
        "data_refueling_gb": 0.0,
    }
    plan = {"plan_id": "P2", "data_limit_gb": 15.0, "data_refueling_price_per_gb": 2.0}
    refuel = [{"name": "refuel_data", "arguments": {"customer_id": "C1", "line_id": "L2", "gb_amount": 2.0}}]

    def run(plan_read: bool) -> dict[str, LabelValue]:
        steps = (
            Run("telecom", policy="")
            .user("Mobile data fails, my number is 555-123-2002.")
            .call("get_details_by_id", line, id="L2")
        )
        if plan_read:
            steps.call("get_details_by_id", plan, id="P2")
        steps.say("Please restart your phone.").call(
            "transfer_to_human_agents", "Transfer successful", summary="Data fails."
        )
        return values(steps.trajectory(refuel, [False], success=False))

    for plan_read in (True, False):
        found = run(plan_read)
        assert found["structured_data_reasoning"] == P and found["multi_step_task_completion"] == L, plan_read


def test_a_wrong_line_read_is_data_reasoning_once_the_agent_tells_the_user_about_it() -> None:
    wrong = {"line_id": "L1", "phone_number": "555-123-2001", "status": "Active", "plan_id": "P1", "data_used_gb": 3.2}
    plan = {"plan_id": "P1", "name": "Basic Plan", "data_limit_gb": 5.0}
    right = {
        "line_id": "L2",
        "phone_number": "555-123-2002",
        "status": "Suspended",
        "plan_id": "P1",
        "data_used_gb": 1.0,
    }

    def told(text: str, reads_right_line: bool = True, gold: list[dict] | None = None) -> LabelValue:
        run = (
            Run("telecom", policy="")
            .user("MMS fails, my number is 555-123-2002.")
            .call("get_details_by_id", wrong, id="L1")
            .call("get_details_by_id", plan, id="P1")
            .say(text)
        )
        if reads_right_line:
            run.call("get_details_by_id", right, id="L2")
        trajectory = run.trajectory(gold or [], [True] * len(gold or []), success=True)
        return values(trajectory)["structured_data_reasoning"]

    assert told("You've used 3.2GB of your 5 GB on the Basic Plan.") == L
    assert told("Your line is active.") == L
    assert (
        told("Let's check MMS on your phone; is it on a 5G network?") == P
    )  # nothing read stated, the right line read next
    assert told("Let's check MMS on your phone.", reads_right_line=False) == P  # the task never needed the line
    refuel = [{"name": "refuel_data", "arguments": {"customer_id": "C1", "line_id": "L2", "gb_amount": 1.0}}]
    assert (
        told("Let's check MMS on your phone.", reads_right_line=False, gold=refuel) == L
    )  # the wrong line stood in throughout


def test_a_reservation_described_without_being_read_is_a_condition_asserted_unverified() -> None:
    def listed(text: str) -> tuple[LabelValue, LabelValue]:
        run = (
            Run()
            .user("I'm ana_1, I need to change my flight from JFK.")
            .call("get_user_details", USER, user_id="ana_1")
            .say(text)
        )
        found = values(run.trajectory([], [], success=True))
        return found["precondition_verification"], found["structured_data_reasoning"]

    assert listed("You have two reservations: ABC123 and XYZ789. Let me pull up both to find the one from JFK.")[0] != L
    assert (
        listed("You have two reservations, ABC123 and XYZ789: which one is the flight from JFK?")[0] != L
    )  # the user's words
    # Never read: nothing was misread (labels/data_reasoning_amendment.md), a state asserted without establishing it.
    assert listed("Your reservation XYZ789 flies JFK to LAX on 2024-05-20.") == (L, P)


def said(text: str, user: str = "I want to cancel ABC123, my plans changed.", **record) -> dict[str, LabelValue]:
    """Values of a run where the agent reads ABC123 (`record` overrides) and then says `text`."""
    run = (
        Run()
        .user(user)
        .call("get_user_details", USER, user_id="ana_1")
        .call("get_reservation_details", booking("ABC123", **record), reservation_id="ABC123")
        .say(text)
    )
    return values(run.trajectory([], [], success=True))


def test_a_difference_taken_from_the_amount_paid_instead_of_the_fare_is_data_reasoning() -> None:
    """ABC123's fare is $200; $230 was paid (insurance on top)."""
    record = {**booking("ABC123", insurance="yes"), "payment_history": [{"payment_id": "credit_card_1", "amount": 230}]}

    def stated(text: str) -> LabelValue:
        run = (
            Run()
            .user("Upgrade ABC123 to business, please.")
            .call("get_user_details", USER, user_id="ana_1")
            .call("get_reservation_details", record, reservation_id="ABC123")
            .say(text)
        )
        return values(run.trajectory([], [], success=True))["structured_data_reasoning"]

    assert stated("Business is $500. Fare difference: $500 - $230 = $270.") == L
    assert stated('{"new_fare_total": 500,\n "estimated_additional_collection": 270}') == L
    assert stated("Business is $500. Fare difference: $500 - $200 = $300.") == P
    assert stated("Total paid: $500 ($230 original + $270 upgrade).") == P  # a sum of payments, not a difference


def test_a_refund_the_policy_does_not_grant_promised_is_policy_compliance() -> None:
    assert said("As a silver member, you are eligible for a full refund for ABC123.", **OLD)["policy_compliance"] == L
    assert (
        said("ABC123 is not eligible for a refund: it was booked over 24 hours ago.", **OLD)["policy_compliance"] == P
    )
    assert (
        said(
            "Your insurance covers illness, so you are eligible for a full refund.",
            user="Cancel ABC123, I am sick.",
            insurance="yes",
            **OLD,
        )["policy_compliance"]
        == P
    )  # the policy grants this one
    assert said("It was booked today, so you are eligible for a full refund.")["policy_compliance"] == P
    assert said("Great! I will now proceed with the refund for ABC123.", **OLD)["policy_compliance"] == L
    assert said("I will now proceed with the refund for ABC123.")["policy_compliance"] == P  # booked today
    assert (
        said("You may be eligible to cancel ABC123 due to this tragic circumstance and receive a full refund.", **OLD)[
            "policy_compliance"
        ]
        == L
    )  # the promise is the clause's, however long


def test_a_cabin_change_refused_for_basic_economy_is_policy_compliance() -> None:
    basic = {"cabin": "basic_economy"}
    assert (
        said("Unfortunately, upgrading the cabin class for a basic economy reservation is not allowed.", **basic)[
            "policy_compliance"
        ]
        == L
    )
    assert said("Sorry, basic economy reservations cannot be upgraded.", **basic)["policy_compliance"] == L
    assert (
        said("Basic economy flights cannot be changed, but the cabin can be upgraded.", **basic)["policy_compliance"]
        == P
    )
    assert said("Basic economy tickets cannot be changed to other flights.", **basic)["policy_compliance"] == P


def test_a_booking_called_recent_that_the_record_dates_earlier_is_data_reasoning() -> None:
    claim = "ABC123 was booked within the last 24 hours, so we can proceed with a full refund."
    assert said(claim, **OLD)["structured_data_reasoning"] == L
    assert said(claim)["structured_data_reasoning"] == P  # booked today: the claim is true
    assert (
        said("ABC123 was not booked within the last 24 hours, so we cannot proceed with a refund.", **OLD)[
            "structured_data_reasoning"
        ]
        == P
    )  # no promise made


def test_a_reservation_called_flown_that_its_dates_put_ahead_is_data_reasoning() -> None:
    claim = "Since the flight in this reservation has already taken off, we cannot cancel it."
    assert (
        said(claim)["structured_data_reasoning"] == L
    )  # booking() flies on 2024-05-20, the policy's now is 2024-05-15
    assert said(claim, date="2024-05-10")["structured_data_reasoning"] == P  # flown: the claim is true
    assert said("The flight has not taken off yet, so ABC123 can be cancelled.")["structured_data_reasoning"] == P


def test_a_cancellation_without_a_refund_is_no_option_the_policy_has() -> None:
    assert said("You can still cancel ABC123, but no refund will be issued.", **OLD)["policy_compliance"] == L
    assert said("Cancel ABC123 without a refund (you would lose the $200 you paid).", **OLD)["policy_compliance"] == L
    assert (
        said("ABC123 cannot be cancelled without a refund or otherwise: it meets none of the conditions.", **OLD)[
            "policy_compliance"
        ]
        == P
    )
    assert said("I can cancel ABC123 for you with a full refund since it was booked today.")["policy_compliance"] == P


def test_offers_the_policy_forbids_are_policy_compliance() -> None:
    assert said("I can upgrade only the outbound flight to business for $120.")["policy_compliance"] == L
    assert said("Upgrading only the outbound flight to business is not possible.")["policy_compliance"] == P
    assert (
        said("If you upgrade only the outgoing flight to business class, the cost will be $152. Proceed?")[
            "policy_compliance"
        ]
        == L
    )
    assert (
        said("If you upgrade only the outgoing flight to business class, that is not allowed.")["policy_compliance"]
        == P
    )
    assert said("Good news: your travel insurance covers the fare difference.")["policy_compliance"] == L
    assert said("Travel insurance only covers cancellations for health or weather reasons.")["policy_compliance"] == P
    partial = "Upgrade ABC123 to business for the outgoing flight only, please."
    assert said("The business upgrade for the outgoing flight is $152.", user=partial)["policy_compliance"] == L
    assert (
        said("The cabin must be the same on all flights, so that upgrade costs $300 for both.", user=partial)[
            "policy_compliance"
        ]
        == P
    )
    complaint = "My flight ABC123 was delayed and I am upset."
    assert said("I can offer compensation for the delay.", user=complaint)["policy_compliance"] == L
    assert (
        said("I can offer compensation for the delay.", user=complaint + " I want compensation.")["policy_compliance"]
        == P
    )


def test_a_procedure_no_tool_provides_promised_is_policy_compliance() -> None:
    assert (
        said("Would you like me to set a reminder to follow up once the refund is processed?")["policy_compliance"] == L
    )
    assert said("I will notify you as soon as a seat opens up.")["policy_compliance"] == L
    assert said("I'll also keep an eye out for cheaper fares.")["policy_compliance"] == L
    assert said("I’ll also keep an eye out for cheaper fares.")["policy_compliance"] == L  # a typographic apostrophe
    assert said("I'm not able to set reminders, but you can contact us again anytime.")["policy_compliance"] == P
    assert said("I will first make the transfer and then notify you that it is done.")["policy_compliance"] == P
    assert (
        said("You will receive an email with the details.")["policy_compliance"] == P
    )  # the system's, not the agent's
    assert (
        said("If you want me to send email confirmations to ana@example.com, I can do that.")["policy_compliance"] == L
    )
    assert said("I'm unable to send you an email confirmation.")["policy_compliance"] == P


def test_a_locked_sim_is_escalated_not_unlocked_by_the_user() -> None:
    def told(text: str, status: str = "The SIM card is locked with a PIN code.") -> LabelValue:
        run = (
            Run("telecom", policy="")
            .user("I have no service, my number is 555-123-2002.")
            .call("check_sim_status", status)
            .say(text)
        )
        return values(run.trajectory([], [], success=False))["policy_compliance"]

    assert told("If you know your SIM PIN, please enter it when prompted on your phone.") == L
    assert told("Your SIM is locked; you do not need to enter any PIN, I will transfer you to technical support.") == P
    assert told("Please enter your SIM PIN when prompted.", status="Your SIM card is active and working.") == P


def test_a_delay_certificate_needs_a_changed_or_cancelled_reservation() -> None:
    silver = {**USER, "membership": "silver"}

    def certificate(cancel_first: bool) -> LabelValue:
        run = (
            Run()
            .user("My flight was delayed and I want to cancel ABC123. Can I get compensation?")
            .call("get_user_details", silver, user_id="ana_1")
            .call("get_reservation_details", booking("ABC123"), reservation_id="ABC123")
        )
        if cancel_first:
            run.say("Cancel ABC123, booked today, for a full refund?").user("yes").call(
                "cancel_reservation", booking("ABC123"), reservation_id="ABC123"
            )
        run.call("send_certificate", "Certificate sent", user_id="ana_1", amount=50)
        return values(run.trajectory([], [], success=True))["policy_compliance"]

    assert certificate(cancel_first=False) == L and certificate(cancel_first=True) == P


def test_a_certificate_for_more_passengers_than_the_reservation_has_is_data_reasoning() -> None:
    silver = {
        **USER,
        "membership": "silver",
        "payment_methods": {
            **USER["payment_methods"],
            "certificate_7": {"source": "certificate", "id": "certificate_7", "amount": 150},
        },
    }

    def offered(text: str, amount: int | None = None) -> LabelValue:
        run = (
            Run()
            .user("My flight on ABC123 was cancelled, there were three of us. Can I get compensation?")
            .call("get_user_details", silver, user_id="ana_1")
            .call("get_reservation_details", booking("ABC123"), reservation_id="ABC123")
            .say(text)
        )
        if amount is not None:
            run.user("yes").call("send_certificate", "Certificate sent", user_id="ana_1", amount=amount)
        return values(run.trajectory([], [], success=False))["structured_data_reasoning"]

    # ABC123 lists one passenger: $100 is the cancellation gesture, $300 counts the user's three
    assert offered("I can send a $300 certificate, $100 for each of the three passengers. Shall I?") == L
    assert offered("I can send a certificate as a gesture. Shall I?", amount=300) == L
    assert (
        offered("I can send a certificate of $100 per passenger, $100 for your one passenger. Shall I?", amount=100)
        == P
    )
    assert offered("You already hold a $150 certificate for your passengers' next trip.") == P  # a balance, no offer


def test_a_certificate_sent_or_offered_after_statuses_showing_no_disruption_confirms_no_facts() -> None:
    silver = {**USER, "membership": "silver"}

    def compensated(status: str, sent: bool) -> LabelValue:
        run = (
            Run()
            .user("My flight HAT001 was delayed and I want to cancel ABC123. Can I get compensation?")
            .call("get_user_details", silver, user_id="ana_1")
            .call("get_reservation_details", booking("ABC123"), reservation_id="ABC123")
            .call("get_flight_status", status, flight_number="HAT001", date="2024-05-20")
        )
        if sent:
            run.call("send_certificate", "Certificate sent", user_id="ana_1", amount=50)
        else:
            run.say("Once ABC123 is cancelled I can issue a $50 certificate as a gesture for the delay.")
        return values(run.trajectory([], [], success=sent))["precondition_verification"]

    for sent in (True, False):
        assert compensated("available", sent) == L and compensated("delayed", sent) == P


def test_steps_left_after_a_misread_status_are_owed_to_the_misreading_the_early_transfer_is_not() -> None:
    """A telecom agent that reads the fault and calls it fine leaves the fix undone and transfers
    believing the guide exhausted: a data-reasoning failure, not also a dropped step; the transfer
    still comes before the guide's steps are exhausted, which the policy does not allow
    (labels/transfer_amendment.md). Without the misreading the step left undone counts too."""
    gold = [{"name": "toggle_roaming", "arguments": {}, "requestor": "user"}]

    def run(said: str) -> dict[str, LabelValue]:
        steps = (
            Run("telecom", policy="")
            .user("MMS fails abroad, my number is 555-123-2002.")
            .call("check_network_status", "Airplane Mode: OFF\nData Roaming Enabled: No")
            .say(said)
            .user("Still failing.")
            .call("transfer_to_human_agents", "Transfer successful", summary="MMS fails.")
        )
        return values(steps.trajectory(gold, [False], success=False))

    misread = run("Roaming is enabled and airplane mode is off, so your settings are fine.")
    assert (
        misread["structured_data_reasoning"],
        misread["multi_step_task_completion"],
        misread["policy_compliance"],
    ) == (L, P, L)
    unread = run("Please restart your phone.")
    assert unread["structured_data_reasoning"] != L and (
        unread["multi_step_task_completion"],
        unread["policy_compliance"],
    ) == (L, L)


def test_a_telecom_transfer_after_the_steps_is_the_guides_last_step() -> None:
    """The troubleshooting guide ends in a transfer once its steps are done: unrequested, it breaks no rule."""
    steps = (
        Run("telecom", policy="")
        .user("No signal, my number is 555-123-2002.")
        .call("check_network_status", "Airplane Mode: OFF\nData Roaming Enabled: Yes")
        .say("Your settings look right.")
        .call("transfer_to_human_agents", "Transfer successful", summary="No signal after all checks.")
    )
    assert values(steps.trajectory([], [], success=False))["policy_compliance"] == P
    airline = (
        Run()
        .user("Cancel ABC123 please.")
        .say("I will transfer you.")
        .call("transfer_to_human_agents", "Transfer successful", summary="wants a cancellation")
    )
    assert values(airline.trajectory([], [], success=False))["policy_compliance"] == L


def test_a_fare_called_the_cheapest_against_the_search_read_is_data_reasoning() -> None:
    def flight(number: str, price: int, seats: int = 5) -> dict:
        return {
            "flight_number": number,
            "origin": "JFK",
            "destination": "LAX",
            "status": "available",
            "available_seats": {"basic_economy": 5, "economy": seats, "business": 5},
            "prices": {"basic_economy": 90, "economy": price, "business": 500},
        }

    def cheapest(
        rival_seats: int = 5, asked: str = "I need the cheapest economy flight JFK to LAX on 2024-05-20."
    ) -> LabelValue:
        run = (
            Run()
            .user(asked)
            .call(
                "search_direct_flight",
                [flight("HAT001", 200), flight("HAT002", 150, rival_seats)],
                origin="JFK",
                destination="LAX",
                date="2024-05-20",
            )
            .say("The cheapest economy option is HAT001 at $200.")
        )
        return values(run.trajectory([], [], success=True))["structured_data_reasoning"]

    assert cheapest() == L
    assert cheapest(rival_seats=0) == P  # no economy seat left on the cheaper one
    assert cheapest(asked="I need the cheapest economy flight JFK to LAX on 2024-05-20 leaving after 5pm.") == P


def test_a_membership_stated_from_no_profile_is_unverified_and_one_the_profile_contradicts_a_misreading() -> None:
    def stated(text: str, read_profile: bool) -> dict[str, LabelValue]:
        run = Run().user("My flight on ABC123 was delayed, what can you do?")
        if read_profile:
            run.call("get_user_details", USER, user_id="ana_1")
        run.call("get_reservation_details", booking("ABC123"), reservation_id="ABC123").say(text)
        return values(run.trajectory([], [], success=False))

    unread = stated("Since you are a regular member without insurance, no compensation applies.", read_profile=False)
    assert unread["precondition_verification"] == L and unread["structured_data_reasoning"] == P
    assert (
        stated("Since you are a regular member without insurance, no compensation applies.", read_profile=True)[
            "precondition_verification"
        ]
        == P
    )
    assert stated("As a gold member you get a certificate.", read_profile=True)["structured_data_reasoning"] == L


def test_asking_the_user_to_provide_a_certificate_to_pay_with_is_no_compensation_offer() -> None:
    def said_first(text: str) -> LabelValue:
        run = Run().user("My flight was delayed and I want to book a new one, ORD to PHL.").say(text)
        return values(run.trajectory([], [], success=False))["precondition_verification"]

    assert said_first("Please provide your user ID and the certificate you'd like to pay with; the fare is $120.") != L
    assert (
        said_first("I can offer you a $100 certificate for the delay.") == L
    )  # offered before any reservation was read
