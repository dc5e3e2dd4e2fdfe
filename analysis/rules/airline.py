"""τ²-bench airline policy as executable checks over what the conversation read and heard.

Each rule names the policy sentence it implements (policy.md of the airline domain). Rules over one
write apply to the agent's writes and to the gold actions alike; the state they consult is the
reservation and user records the tool results showed, flight statuses, and the user's words (a
cancellation reason), as `airline_records` reads them. Rules over what the agent said are in
`airline_offers` and `airline_fares` (a fare called the cheapest).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tracegym.analysis.detectors import canonical
from tracegym.analysis.rules import airline_fares, airline_offers, procedures
from tracegym.analysis.rules.airline_records import (
    CERTIFICATE_PER_PASSENGER,
    cancellation_refused,
    flown,
    flown_unnoticed,
    may_compensate,
    reservation,
    reservations,
    undisrupted_statuses,
    unflown_reading,
    user,
)
from tracegym.analysis.rules.conversation import Call, Conversation, dicts, listed, mentions
from tracegym.analysis.rules.domain import ActionRule, ConversationRule, Domain, Finding
from tracegym.analysis.rules.payments import ORIGINAL_PAYMENT, payment_words

CABINS = ("basic_economy", "economy", "business")  # cheapest first
BAGS = ("bag", "bags", "baggage", "baggages", "luggage", "suitcase", "suitcases")
FREE_BAGS = {  # membership -> cabin -> free checked bags per passenger
    "regular": {"basic_economy": 0, "economy": 1, "business": 2},
    "silver": {"basic_economy": 1, "economy": 2, "business": 3},
    "gold": {"basic_economy": 2, "economy": 3, "business": 4},
}
NO_BAGS = re.compile(
    r"\b(?:no|(?:do ?n[o'’]t|not|never) (?:need|want)(?: any)?|not interested in (?:adding )?(?:any )?|"
    r"(?:do ?n[o'’]t|not|never) (?:need|want) (?:(?!but\b|though\b)[\w-]+,? ){1,4}(?:or|nor|and) (?:any )?(?:extra )?)"
    r"\s*(?:checked\s+)?(?:bags?|baggage|luggage)\b",
    re.IGNORECASE,
)
_NO_REFUND = re.compile(
    r"\b(?:not eligible|ineligible|non-?refundable|no refund|not (?:be )?refund\w*|cannot be (?:cancell?ed|"
    r"refunded))\b",
    re.IGNORECASE,
)


def _cancellation(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """Cancellable only if nothing was flown and one of the four conditions holds. The reservation
    as first shown anywhere in the run (a cancellation's own result shows it too). An agent that
    had told the user this reservation gets no refund verified the conditions and cancelled anyway:
    a policy breach, not a condition left unchecked."""
    record = reservation(conversation, arguments.get("reservation_id"), None, first=True)
    refused = record and cancellation_refused(conversation, record, before)
    if refused:
        text, was_flown = refused
        yield Finding(
            "policy_compliance",
            before,
            text + (" (policy: the agent cannot help, transfer)" if was_flown else ""),
            transfers=was_flown,
        )
        if was_flown and (gone := flown_unnoticed(conversation, record, before)):
            yield unflown_reading(record, gone, before)
        if not _told_no_refund(conversation, record.get("reservation_id"), before):
            yield Finding("precondition_verification", before, text)


def _told_no_refund(conversation: Conversation, reservation_id: Any, before: int) -> bool:
    """Whether an agent message before `before` said reservation `reservation_id` gets no refund:
    in one sentence naming it, or in a message naming no other reservation."""
    others = {str(r.get("reservation_id")) for r in reservations(conversation, before)} - {str(reservation_id)}
    for _, said in conversation.texts("assistant", 0, before):
        if not _NO_REFUND.search(said) or not mentions(said, reservation_id):
            continue
        if not any(mentions(said, other) for other in others) or any(
            _NO_REFUND.search(sentence) and mentions(sentence, reservation_id)
            for sentence in re.split(r"(?<=[.!?\n])", said)
        ):
            return True
    return False


def _flights_change(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    record = reservation(conversation, arguments.get("reservation_id"), before)
    if record is None:
        return
    old = [(f.get("flight_number"), f.get("date")) for f in dicts(record.get("flights"))]
    new = [(f.get("flight_number"), f.get("date")) for f in dicts(arguments.get("flights"))]
    rid = record["reservation_id"]
    if record.get("cabin") == "basic_economy" and sorted(map(str, old)) != sorted(map(str, new)):
        yield Finding(
            "policy_compliance",
            before,
            f"update_reservation_flights({rid}): changes the flights of a basic economy reservation ({old} -> {new})",
        )
    if arguments.get("cabin") != record.get("cabin") and (gone := flown(conversation, record, before)):
        yield Finding(
            "policy_compliance",
            before,
            f"update_reservation_flights({rid}): cabin {record.get('cabin')} -> "
            f"{arguments.get('cabin')} after flight {gone.get('flight_number')} was flown",
        )
    airports = _route(conversation, new, before)
    if airports and (airports[0] != record.get("origin") or record.get("destination") not in airports[1:]):
        yield Finding(
            "policy_compliance",
            before,
            f"update_reservation_flights({rid}): new route {'-'.join(map(str, airports))} "
            f"changes the reservation's {record.get('origin')}-{record.get('destination')}",
        )


def _route(conversation: Conversation, flights: list[tuple[Any, Any]], before: int) -> list[str]:
    """Origin then each destination of `flights`, from flight records read; [] when one is unknown."""
    known = {
        str(obj.get("flight_number")): obj
        for _, obj in conversation.records("flight_number", before)
        if "origin" in obj and "destination" in obj
    }
    if not flights or any(str(number) not in known for number, _ in flights):
        return []
    return [known[str(flights[0][0])]["origin"]] + [known[str(number)]["destination"] for number, _ in flights]


def _cabins(conversation: Conversation, record_id: Any, before: int, write: dict) -> set[str]:
    """The reservation's cabin as first and as last read before `before` (the allowance follows the
    cabin after a change); only the new cabin where the agent's own cabin change on it succeeded
    before the write `write` (its arguments), in an earlier message or earlier in the same one."""
    calls = conversation.agent_calls
    at = next((n for n, c in enumerate(calls) if c.index == before and c.arguments == write), len(calls))
    changed = [
        str(c.arguments.get("cabin"))
        for c in calls[:at]
        if c.name == "update_reservation_flights"
        and not c.error
        and c.arguments.get("reservation_id") == record_id
        and c.arguments.get("cabin") in CABINS
    ]
    if changed:
        return {changed[-1]}
    return {
        str(r.get("cabin"))
        for r in (
            reservation(conversation, record_id, before, first=True),
            reservation(conversation, record_id, before),
        )
        if r is not None
    }


def _bags(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """Free checked bags per passenger by the booking user's membership and the cabin; bags are
    added only when the user wants them, and never removed. With the membership unread, the paid
    count must still be one some membership gives (`_bags_any_membership`)."""
    total, nonfree = arguments.get("total_baggages"), arguments.get("nonfree_baggages")
    if name == "update_reservation_baggages":
        record = reservation(conversation, arguments.get("reservation_id"), before, first=True)
        if record is None:
            return
        cabins = _cabins(conversation, record["reservation_id"], before, arguments)
        passengers, owner = len(listed(record.get("passengers"))), record.get("user_id")
        had = record.get("total_baggages") if isinstance(record.get("total_baggages"), int) else 0
        if isinstance(total, int) and total < had:
            yield Finding(
                "policy_compliance",
                before,
                f"{name}({record['reservation_id']}): removes checked bags ({had} -> {total})",
            )
    else:
        cabins, passengers, owner, had = (
            {str(arguments.get("cabin"))},
            len(listed(arguments.get("passengers"))),
            arguments.get("user_id"),
            0,
        )
    if isinstance(total, int) and total > had and NO_BAGS.search(conversation.user_text(before)):
        text = f"{name}: {total} checked bags although the user wanted none"
        yield Finding("policy_compliance", before, text)  # "Do not add checked bags that the user does not need."
        yield Finding("tool_calling_precision", before, text)  # a count no user message gave
    if not isinstance(total, int) or not isinstance(nonfree, int):
        return
    profile = user(conversation, before, owner)
    if profile is None:  # membership unread: the count must still fall within what some membership allows
        yield from _bags_any_membership(name, cabins, passengers, total, nonfree, before)
        return
    allowances = {cabin: FREE_BAGS.get(str(profile.get("membership")), {}).get(cabin) for cabin in cabins}
    expected = {cabin: max(0, total - free * passengers) for cabin, free in allowances.items() if free is not None}
    if expected and nonfree not in expected.values():
        cabin = sorted(expected)[0]
        yield from _miscounted(
            before,
            f"{name}: nonfree_baggages={nonfree} for {total} bags, but a {profile.get('membership')} "
            f"member in {cabin} has {allowances[cabin]} free per passenger ({passengers} passengers): "
            f"{expected[cabin]} expected",
        )


def _miscounted(before: int, text: str) -> Iterator[Finding]:
    """A paid-bag count the allowance contradicts: the allowance misread (data reasoning) and a wrong
    count in the call (tool-calling precision: counts are among the arguments a call must get exactly right)."""
    yield Finding("structured_data_reasoning", before, text)
    yield Finding("tool_calling_precision", before, text)


def _bags_any_membership(
    name: str, cabins: set[str], passengers: int, total: int, nonfree: int, before: int
) -> Iterator[Finding]:
    """Paid bags outside what any membership gives in any of the cabins: more than the fewest free
    bags leave to pay for, or fewer than the most free bags do."""
    allowances = [levels[cabin] for levels in FREE_BAGS.values() for cabin in cabins if cabin in levels]
    if not allowances:
        return
    most, fewest = max(0, total - min(allowances) * passengers), max(0, total - max(allowances) * passengers)
    if not fewest <= nonfree <= most:
        yield from _miscounted(
            before,
            f"{name}: nonfree_baggages={nonfree} for {total} bags ({passengers} passengers, "
            f"{'/'.join(sorted(cabins))}); every membership leaves between {fewest} and {most} to pay",
        )


def _payment(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """At most one certificate, one credit card and three gift cards, all from the user's profile."""
    ids = (
        [p.get("payment_id") for p in dicts(arguments.get("payment_methods"))]
        if name == "book_reservation"
        else [arguments.get("payment_id")]
    )
    owner = arguments.get("user_id") or (reservation(conversation, arguments.get("reservation_id"), before) or {}).get(
        "user_id"
    )
    profile = user(conversation, before, owner)
    if profile is not None:
        held = profile.get("payment_methods")
        outside = [p for p in ids if p and str(p) not in (map(str, held) if isinstance(held, (dict, list)) else ())]
        if outside:
            yield Finding(
                "policy_compliance",
                before,
                f"{name}: payment {', '.join(map(str, outside))} is not in the user's profile",
            )
    for kind, limit in (("certificate", 1), ("credit_card", 1), ("gift_card", 3)):
        used = [p for p in ids if str(p).startswith(kind)]
        if len(used) > limit:
            yield Finding(
                "policy_compliance",
                before,
                f"{name}: {len(used)} {kind.replace('_', ' ')}s ({', '.join(map(str, used))}); at most {limit}",
            )


def _passenger_birthdates(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """A passenger named like the user or a saved passenger keeps the date of birth the profile has."""
    owner = arguments.get("user_id") or (reservation(conversation, arguments.get("reservation_id"), before) or {}).get(
        "user_id"
    )
    profile = user(conversation, before, owner)
    if profile is None:
        return
    name_of = profile.get("name") if isinstance(profile.get("name"), dict) else {}
    known = {(str(name_of.get("first_name")), str(name_of.get("last_name"))): profile.get("dob")}
    known.update(
        {
            (str(p.get("first_name")), str(p.get("last_name"))): p.get("dob")
            for p in dicts(profile.get("saved_passengers"))
        }
    )
    for passenger in dicts(arguments.get("passengers")):
        key = (str(passenger.get("first_name")), str(passenger.get("last_name")))
        if (
            key in known
            and known[key]
            and passenger.get("dob") != known[key]
            and not conversation.said_by_user(passenger.get("dob"), before)
        ):
            yield Finding(
                "structured_data_reasoning",
                before,
                f"{name}: passenger {' '.join(key)} born {passenger.get('dob')}, the profile says {known[key]}",
            )


def _certificate(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """The facts confirmed first: a reservation read, and where the agent checked flight statuses,
    one of them delayed or cancelled (a certificate after "available" or "on time" confirms nothing)."""
    profile, read = user(conversation, before, arguments.get("user_id")), reservations(conversation, before)
    statuses = undisrupted_statuses(conversation, before)
    if not read:
        yield Finding(
            "precondition_verification",
            before,
            f"send_certificate({arguments.get('amount')}): no reservation was read to confirm the facts",
        )
    elif statuses:
        yield Finding(
            "precondition_verification",
            before,
            f"send_certificate({arguments.get('amount')}): every flight status "
            f"checked shows no disruption ({', '.join(statuses)})",
        )
    elif profile is not None and not may_compensate(profile, read):
        yield Finding(
            "policy_compliance",
            before,
            f"send_certificate({arguments.get('amount')}): a regular member with no "
            "insurance flying (basic) economy gets no compensation",
        )


def _delay_certificate(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """A delay's certificate ($50 per passenger of a reservation read) only after the agent changed
    or cancelled a reservation (the agent's own successful writes, or the gold's before it)."""
    amount, read = arguments.get("amount"), reservations(conversation, before)
    delayed = {CERTIFICATE_PER_PASSENGER["delayed"] * len(listed(r.get("passengers"))) for r in read}
    if amount not in delayed or amount in {
        CERTIFICATE_PER_PASSENGER["cancelled"] * len(listed(r.get("passengers"))) for r in read
    }:
        return
    changed = any(
        c.name in ("update_reservation_flights", "cancel_reservation") and not c.error and c.index < before
        for c in conversation.agent_calls
    ) or any(a.get("name") in ("update_reservation_flights", "cancel_reservation") for a in conversation.prior)
    if not changed:
        yield Finding(
            "policy_compliance",
            before,
            f"send_certificate({amount}): a delay's certificate although no reservation was changed or cancelled",
        )


def _downgrade(cabin: Any, new_cabin: Any) -> bool:
    """Whether `new_cabin` is a cheaper cabin class than `cabin` (both known names)."""
    return str(cabin) in CABINS and str(new_cabin) in CABINS and CABINS.index(str(new_cabin)) < CABINS.index(str(cabin))


def confirmation(call: Call, conversation: Conversation) -> list[tuple[str, ...]] | None:
    """What the agent must have listed before the user's yes (None: the policy needs no confirmation)."""
    arguments = call.arguments
    record = reservation(conversation, arguments.get("reservation_id"), call.index) or {}
    pay = payment_words(conversation, arguments.get("payment_id"))
    paid_before = {p.get("payment_id") for p in dicts(record.get("payment_history"))}
    if pay and arguments.get("payment_id") in paid_before:  # "the original payment method" names it
        pay += ORIGINAL_PAYMENT
    if call.name == "book_reservation":
        flights = [(f.get("flight_number"),) for f in dicts(arguments.get("flights"))]
        payments = tuple(
            w for p in dicts(arguments.get("payment_methods")) for w in payment_words(conversation, p.get("payment_id"))
        )
        return flights + ([payments] if payments else [])
    if call.name == "update_reservation_flights":
        if _downgrade(record.get("cabin"), arguments.get("cabin")) and arguments.get("payment_id") in paid_before:
            # the fare difference is refunded to where the reservation was paid from: nothing for the user to choose
            pay = ()
        kept = {str(f.get("flight_number")) for f in dicts(record.get("flights"))}
        changed = [
            (f.get("flight_number"),)
            for f in dicts(arguments.get("flights"))
            if str(f.get("flight_number")) not in kept
        ]
        details = changed or [(str(arguments.get("cabin")), str(arguments.get("cabin")).replace("_", " "))]
        return details + ([pay] if pay else [])
    if call.name == "update_reservation_baggages":
        charged = isinstance(arguments.get("nonfree_baggages"), int) and arguments["nonfree_baggages"] > 0
        return [BAGS, (arguments.get("total_baggages"),)] + ([pay] if charged and pay else [])
    if call.name == "update_reservation_passengers":
        before = [canonical(p) for p in listed(record.get("passengers"))]
        return [
            (p.get("first_name"), p.get("last_name"), p.get("dob"))
            for p in dicts(arguments.get("passengers"))
            if canonical(p) not in before
        ]
    return None


_UPDATE = "Before taking any actions that update the booking database"
WRITES = frozenset(
    {
        "book_reservation",
        "cancel_reservation",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
        "send_certificate",
    }
)

DOMAIN = Domain(
    name="airline",
    writes=WRITES,
    reads=frozenset(
        {
            "get_user_details",
            "get_reservation_details",
            "get_flight_status",
            "list_all_airports",
            "search_direct_flight",
            "search_onestop_flight",
            "calculate",
        }
    ),  # τ²-bench's READ tools, and calculate
    record_keys=("reservation_id", "user_id"),
    confirmation=confirmation,
    confirmation_policy=_UPDATE,
    action_rules=(
        ActionRule(
            "Otherwise, flight can be cancelled if any of the following is true",
            frozenset({"cancel_reservation"}),
            _cancellation,
        ),
        ActionRule(
            "Basic economy flights cannot be modified.", frozenset({"update_reservation_flights"}), _flights_change
        ),
        ActionRule(
            "Do not add checked bags that the user does not need.",
            frozenset({"update_reservation_baggages", "book_reservation"}),
            _bags,
        ),
        ActionRule(
            "Each reservation can use at most one travel certificate",
            frozenset({"book_reservation", "update_reservation_flights", "update_reservation_baggages"}),
            _payment,
        ),
        ActionRule(
            "The agent needs to collect the first name, last name, and date of birth for each passenger.",
            frozenset({"book_reservation", "update_reservation_passengers"}),
            _passenger_birthdates,
        ),
        ActionRule(
            "Always confirms the facts before offering compensation.", frozenset({"send_certificate"}), _certificate
        ),
        ActionRule(
            "If the user complains about delayed flights in a reservation and wants to change or cancel the "
            "reservation, the agent can offer a certificate as a gesture after confirming the facts and changing or "
            "cancelling the reservation",
            frozenset({"send_certificate"}),
            _delay_certificate,
        ),
    ),
    conversation_rules=(
        *airline_offers.RULES,
        procedures.RULE,
        ConversationRule(
            "Seat availability and prices are listed for each cabin class.", airline_fares.cheapest_claims
        ),
        ConversationRule(
            "If the price after cabin change is higher than the original price, the user is "
            "required to pay for the difference.",
            airline_fares.paid_as_fare,
        ),
    ),
    derived=frozenset({"flights", "nonfree_baggages", "amount", "payment_methods"}),
    preconditions_always=True,
)
