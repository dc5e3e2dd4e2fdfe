"""Tool-calling precision on hand-built airline runs: what counts as a wrong call and what does not."""

from __future__ import annotations

from tau_runs import L, P, looked_up, values

FLIGHT = {"flight_number": "HAT002", "date": "2024-05-21"}


def changed(flight: dict) -> dict:
    """Values of a run that moves ABC123 to `flight` after the user's yes; τ² recorded the gold's
    flight change as unmatched (it compares the call's arguments whole)."""
    arguments = {"reservation_id": "ABC123", "cabin": "economy", "flights": [flight], "payment_id": "credit_card_1"}
    run = (looked_up("ABC123").user("Please move ABC123 to HAT002 on May 21.")
           .call("search_direct_flight", [{**FLIGHT, "origin": "JFK", "destination": "LAX", "price": 210}],
                 origin="JFK", destination="LAX", date="2024-05-21")
           .say("I'll move ABC123 to HAT002 on 2024-05-21, paying the $10 difference with your visa 4321. Proceed?").user("yes")
           .call("update_reservation_flights", {"reservation_id": "ABC123"}, **arguments))
    gold = [{"name": "update_reservation_flights", "arguments": {**arguments, "flights": [FLIGHT]}}]
    return values(run.trajectory(gold, [False]))


def test_fields_the_gold_does_not_name_are_no_wrong_argument() -> None:
    extra = changed({**FLIGHT, "origin": "JFK", "destination": "LAX", "price": 210})
    assert extra["tool_calling_precision"] == P and extra["structured_data_reasoning"] == P
    assert changed({**FLIGHT, "date": "2024-05-22"})["tool_calling_precision"] == L


def test_only_a_repeated_write_or_transfer_is_a_loop() -> None:
    def repeated(name: str, times: int, **arguments) -> dict:
        run = looked_up("ABC123").user("Can you help me with ABC123?")
        for _ in range(times):
            run.call(name, "Transfer successful" if name == "transfer_to_human_agents" else {"reservation_id": "ABC123"}, **arguments)
        return values(run.say("Done.").trajectory([], [], success=True))

    assert repeated("get_reservation_details", 3, reservation_id="ABC123")["tool_calling_precision"] == P  # a read changes nothing
    assert repeated("transfer_to_human_agents", 3, summary="help")["tool_calling_precision"] == L
    assert repeated("transfer_to_human_agents", 2, summary="help")["tool_calling_precision"] == P
