"""τ²-bench airline policy as executable checks over what the conversation read and heard.

Each rule names the policy sentence it implements (policy.md of the airline domain). Rules over one
write apply to the agent's writes and to the gold actions alike; the state they consult is the
reservation and user records the tool results showed, flight statuses, and the user's words (a
cancellation reason). "Now" is the policy's own "The current time is ..." line.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, Iterator

from tracegym.analysis.detectors import canonical
from tracegym.analysis.policy.conversation import Call, Conversation, mentions
from tracegym.analysis.policy.domain import ActionRule, ConversationRule, Domain, Finding
from tracegym.analysis.policy.payments import payment_words

BAGS = ("bag", "bags", "baggage", "baggages", "luggage", "suitcase", "suitcases")
FREE_BAGS = {  # membership -> cabin -> free checked bags per passenger
    "regular": {"basic_economy": 0, "economy": 1, "business": 2},
    "silver": {"basic_economy": 1, "economy": 2, "business": 3},
    "gold": {"basic_economy": 2, "economy": 3, "business": 4},
}
COVERED = re.compile(r"\b(sick|ill|illness|health|medical|hospital\w*|surgery|injur\w*|doctor|emergency room|"
                     r"weather|storm|hurricane|snow\w*|flood\w*|blizzard)\b", re.IGNORECASE)
NO_BAGS = re.compile(r"\b(?:no|(?:do ?n[o'’]t|not|never) (?:need|want)(?: any)?|not interested in (?:adding )?(?:any )?)"
                     r"\s*(?:checked\s+)?(?:bags?|baggage|luggage)\b", re.IGNORECASE)
_MEMBER_CLAIM = re.compile(r"\b(?:you(?:'re| are)|your|as an?)\s+(?:a\s+)?(gold|silver|regular)\s+(?:member|membership|status|tier)",
                           re.IGNORECASE)
_OFFER = re.compile(r"\b(offer|issue|provide|send|give|compensate)\w*\b[^.?!\n]{0,80}\b(certificate|compensation|voucher)",
                    re.IGNORECASE)
_ROUTE_OR_DATE = re.compile(r"\b[A-Z]{3}\b(?<!USA)(?<!EST)|\b\d{4}-\d{2}-\d{2}\b|\bfrom [A-Z][a-z]+.{0,30}\bto [A-Z][a-z]+")


def reservation(conversation: Conversation, reservation_id: Any, before: int | None, first: bool = False) -> dict | None:
    """The reservation record read before `before` (the latest, or with `first` the initial one),
    with the cabin and flights of any flight change among `conversation.prior` applied."""
    record = conversation.record("reservation_id", reservation_id, before, first=first, with_key="flights")
    for action in conversation.prior:
        arguments = action.get("arguments") or {}
        if record is not None and action.get("name") == "update_reservation_flights" and arguments.get("reservation_id") == reservation_id:
            record = {**record, "cabin": arguments.get("cabin", record.get("cabin")), "flights": arguments.get("flights") or record.get("flights")}
    return record


def user(conversation: Conversation, before: int, user_id: Any = None) -> dict | None:
    """The user profile read before `before` (of `user_id` when given)."""
    found = [obj for _, obj in conversation.records("membership", before)
             if user_id is None or obj.get("user_id") == user_id]
    return found[-1] if found else None


def flight_status(conversation: Conversation, flight: dict, before: int) -> str | None:
    statuses = [c.output for c in conversation.agent_calls if c.name == "get_flight_status" and c.index < before
                and c.arguments.get("flight_number") == flight.get("flight_number")
                and c.arguments.get("date") == flight.get("date") and isinstance(c.output, str)]
    return statuses[-1].strip().lower() if statuses else None


def flown(conversation: Conversation, record: dict, before: int) -> dict | None:
    """The first flight of `record` already flown (dated before today, or reported landed/flying)."""
    today = conversation.now
    for flight in record.get("flights") or []:
        status = flight_status(conversation, flight, before)
        if status in ("landed", "flying") or (today and str(flight.get("date")) < today.date().isoformat()):
            return flight
    return None


def _cancellation(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """Cancellable only if nothing was flown and one of the four conditions holds. The reservation
    as first shown anywhere in the run (a cancellation's own result shows it too)."""
    record = reservation(conversation, arguments.get("reservation_id"), None, first=True)
    if record is None:
        return
    rid = record["reservation_id"]
    gone = flown(conversation, record, before)
    if gone is not None:
        text = f"cancel_reservation({rid}): flight {gone.get('flight_number')} on {gone.get('date')} was already flown"
        yield Finding("policy_compliance", before, text + " (policy: the agent cannot help, transfer)")
        yield Finding("precondition_verification", before, text)
        return
    today, created = conversation.now, record.get("created_at")
    recent = bool(today and created and datetime.fromisoformat(str(created)) >= today - timedelta(hours=24))
    cancelled = any(flight_status(conversation, f, before) == "cancelled" for f in record.get("flights") or [])
    insured = record.get("insurance") == "yes" and COVERED.search(conversation.user_text(before))
    if recent or cancelled or record.get("cabin") == "business" or insured:
        return
    text = (f"cancel_reservation({rid}): booked {created} (over 24 h before now), cabin {record.get('cabin')}, "
            f"insurance {record.get('insurance')}, no airline cancellation, "
            + ("no health or weather reason given" if record.get("insurance") == "yes" else "no insurance"))
    yield Finding("policy_compliance", before, text)
    yield Finding("precondition_verification", before, text)


def _flights_change(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    record = reservation(conversation, arguments.get("reservation_id"), before)
    if record is None:
        return
    old = [(f.get("flight_number"), f.get("date")) for f in record.get("flights") or []]
    new = [(f.get("flight_number"), f.get("date")) for f in arguments.get("flights") or [] if isinstance(f, dict)]
    rid = record["reservation_id"]
    if record.get("cabin") == "basic_economy" and sorted(map(str, old)) != sorted(map(str, new)):
        yield Finding("policy_compliance", before, f"update_reservation_flights({rid}): changes the flights of a basic "
                                                   f"economy reservation ({old} -> {new})")
    if arguments.get("cabin") != record.get("cabin") and (gone := flown(conversation, record, before)):
        yield Finding("policy_compliance", before, f"update_reservation_flights({rid}): cabin {record.get('cabin')} -> "
                                                   f"{arguments.get('cabin')} after flight {gone.get('flight_number')} was flown")
    airports = _route(conversation, new, before)
    if airports and (airports[0] != record.get("origin") or record.get("destination") not in airports[1:]):
        yield Finding("policy_compliance", before, f"update_reservation_flights({rid}): new route {'-'.join(airports)} "
                                                   f"changes the reservation's {record.get('origin')}-{record.get('destination')}")


def _route(conversation: Conversation, flights: list[tuple[Any, Any]], before: int) -> list[str]:
    """Origin then each destination of `flights`, from flight records read; [] when one is unknown."""
    known = {str(obj.get("flight_number")): obj for _, obj in conversation.records("flight_number", before)
             if "origin" in obj and "destination" in obj}
    if not flights or any(str(number) not in known for number, _ in flights):
        return []
    return [known[str(flights[0][0])]["origin"]] + [known[str(number)]["destination"] for number, _ in flights]


def _cabins(conversation: Conversation, record_id: Any, before: int) -> set[str]:
    """The reservation's cabin as first and as last read before `before` (the allowance follows the
    cabin after a change)."""
    return {str(r.get("cabin")) for r in (reservation(conversation, record_id, before, first=True),
                                          reservation(conversation, record_id, before)) if r is not None}


def _bags(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """Free checked bags per passenger by the booking user's membership and the cabin; bags are
    added only when the user wants them, and never removed."""
    total, nonfree = arguments.get("total_baggages"), arguments.get("nonfree_baggages")
    if name == "update_reservation_baggages":
        record = reservation(conversation, arguments.get("reservation_id"), before, first=True)
        if record is None:
            return
        cabins, passengers, owner = _cabins(conversation, record["reservation_id"], before), len(record.get("passengers") or []), record.get("user_id")
        had = record.get("total_baggages") or 0
        if isinstance(total, int) and total < had:
            yield Finding("policy_compliance", before, f"{name}({record['reservation_id']}): removes checked bags ({had} -> {total})")
    else:
        cabins, passengers, owner, had = {str(arguments.get("cabin"))}, len(arguments.get("passengers") or []), arguments.get("user_id"), 0
    if isinstance(total, int) and total > had and NO_BAGS.search(conversation.user_text(before)):
        yield Finding("policy_compliance", before, f"{name}: {total} checked bags although the user wanted none")
    profile = user(conversation, before, owner)
    if profile is None or not isinstance(total, int) or not isinstance(nonfree, int):
        return
    allowances = {cabin: FREE_BAGS.get(str(profile.get("membership")), {}).get(cabin) for cabin in cabins}
    expected = {cabin: max(0, total - free * passengers) for cabin, free in allowances.items() if free is not None}
    if expected and nonfree not in expected.values():
        cabin = sorted(expected)[0]
        yield Finding("structured_data_reasoning", before,
                      f"{name}: nonfree_baggages={nonfree} for {total} bags, but a {profile.get('membership')} member in "
                      f"{cabin} has {allowances[cabin]} free per passenger ({passengers} passengers): {expected[cabin]} expected")


def _payment(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """At most one certificate, one credit card and three gift cards, all from the user's profile."""
    ids = ([p.get("payment_id") for p in arguments.get("payment_methods") or [] if isinstance(p, dict)]
           if name == "book_reservation" else [arguments.get("payment_id")])
    owner = arguments.get("user_id") or (reservation(conversation, arguments.get("reservation_id"), before) or {}).get("user_id")
    profile = user(conversation, before, owner)
    if profile is not None:
        outside = [p for p in ids if p and p not in (profile.get("payment_methods") or {})]
        if outside:
            yield Finding("policy_compliance", before, f"{name}: payment {', '.join(map(str, outside))} is not in the user's profile")
    for kind, limit in (("certificate", 1), ("credit_card", 1), ("gift_card", 3)):
        used = [p for p in ids if str(p).startswith(kind)]
        if len(used) > limit:
            yield Finding("policy_compliance", before, f"{name}: {len(used)} {kind.replace('_', ' ')}s ({', '.join(used)}); at most {limit}")


def _passenger_birthdates(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """A passenger named like the user or a saved passenger keeps the date of birth the profile has."""
    owner = arguments.get("user_id") or (reservation(conversation, arguments.get("reservation_id"), before) or {}).get("user_id")
    profile = user(conversation, before, owner)
    if profile is None:
        return
    known = {(str((profile.get("name") or {}).get("first_name")), str((profile.get("name") or {}).get("last_name"))): profile.get("dob")}
    known.update({(str(p.get("first_name")), str(p.get("last_name"))): p.get("dob") for p in profile.get("saved_passengers") or []})
    for passenger in arguments.get("passengers") or []:
        key = (str(passenger.get("first_name")), str(passenger.get("last_name")))
        if key in known and known[key] and passenger.get("dob") != known[key] and not conversation.said_by_user(passenger.get("dob"), before):
            yield Finding("structured_data_reasoning", before, f"{name}: passenger {' '.join(key)} born {passenger.get('dob')}, "
                                                               f"the profile says {known[key]}")


def _certificate(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    profile = user(conversation, before, arguments.get("user_id"))
    reservations = [obj for _, obj in conversation.records("reservation_id", before) if "flights" in obj]
    if not reservations:
        yield Finding("precondition_verification", before, f"send_certificate({arguments.get('amount')}): no reservation "
                                                           "was read to confirm the facts")
    elif profile is not None and not _may_compensate(profile, reservations):
        yield Finding("policy_compliance", before, f"send_certificate({arguments.get('amount')}): a regular member with no "
                                                   "insurance flying (basic) economy gets no compensation")


def _may_compensate(profile: dict, reservations: list[dict]) -> bool:
    return profile.get("membership") in ("silver", "gold") or any(
        r.get("insurance") == "yes" or r.get("cabin") == "business" for r in reservations)


def _compensation_offers(conversation: Conversation) -> Iterator[Finding]:
    """Offering a certificate or compensation before confirming the facts (no reservation read),
    or to a user the policy gives none."""
    for index, text in conversation.texts("assistant"):
        if not (_OFFER.search(text) and "$" in text):
            continue
        profile = user(conversation, index)
        reservations = [obj for _, obj in conversation.records("reservation_id", index) if "flights" in obj]
        if not reservations:
            yield Finding("precondition_verification", index, f"offers compensation before reading any reservation: {text}")
        if profile is not None and not _may_compensate(profile, reservations):
            yield Finding("policy_compliance", index, f"offers compensation to a {profile.get('membership')} member with "
                                                      f"no insurance or business cabin: {text}")
        return


def _membership_claims(conversation: Conversation) -> Iterator[Finding]:
    """Stating a membership level the user's profile contradicts."""
    for index, text in conversation.texts("assistant"):
        profile = user(conversation, index)
        claim = _MEMBER_CLAIM.search(text)
        if profile is not None and claim and claim.group(1).lower() != str(profile.get("membership")).lower():
            yield Finding("structured_data_reasoning", index, f"says {claim.group(0)!r}; the profile's membership is "
                                                              f"{profile.get('membership')}: {text}")
            return


def _unread_reservation_claims(conversation: Conversation) -> Iterator[Finding]:
    """Describing a reservation (route, dates) that was never read."""
    known = {str(r) for _, obj in conversation.records("reservations") for r in obj.get("reservations") or []}
    for index, text in conversation.texts("assistant"):
        if not _ROUTE_OR_DATE.search(text):
            continue
        for rid in sorted(known):
            if mentions(text, rid) and reservation(conversation, rid, index) is None:
                yield Finding("structured_data_reasoning", index, f"describes reservation {rid} without having read it: {text}")
                return


def confirmation(call: Call, conversation: Conversation) -> list[tuple[str, ...]] | None:
    """What the agent must have listed before the user's yes (None: the policy needs no confirmation)."""
    arguments = call.arguments
    pay = payment_words(conversation, arguments.get("payment_id"))
    if call.name == "book_reservation":
        flights = [(f.get("flight_number"),) for f in arguments.get("flights") or [] if isinstance(f, dict)]
        payments = tuple(w for p in arguments.get("payment_methods") or [] if isinstance(p, dict)
                         for w in payment_words(conversation, p.get("payment_id")))
        return flights + ([payments] if payments else [])
    if call.name == "update_reservation_flights":
        record = reservation(conversation, arguments.get("reservation_id"), call.index) or {}
        kept = {f.get("flight_number") for f in record.get("flights") or []}
        changed = [(f.get("flight_number"),) for f in arguments.get("flights") or []
                   if isinstance(f, dict) and f.get("flight_number") not in kept]
        details = changed or [(str(arguments.get("cabin")), str(arguments.get("cabin")).replace("_", " "))]
        return details + ([pay] if pay else [])
    if call.name == "update_reservation_baggages":
        charged = isinstance(arguments.get("nonfree_baggages"), int) and arguments["nonfree_baggages"] > 0
        return [BAGS, (arguments.get("total_baggages"),)] + ([pay] if charged and pay else [])
    if call.name == "update_reservation_passengers":
        record = reservation(conversation, arguments.get("reservation_id"), call.index) or {}
        before = [canonical(p) for p in record.get("passengers") or []]
        return [(p.get("first_name"), p.get("last_name"), p.get("dob")) for p in arguments.get("passengers") or []
                if isinstance(p, dict) and canonical(p) not in before]
    return None


_UPDATE = "Before taking any actions that update the booking database"
WRITES = frozenset({"book_reservation", "cancel_reservation", "update_reservation_baggages", "update_reservation_flights",
                    "update_reservation_passengers", "send_certificate"})

DOMAIN = Domain(
    name="airline",
    writes=WRITES,
    record_keys=("reservation_id", "user_id"),
    confirmation=confirmation,
    confirmation_policy=_UPDATE,
    action_rules=(
        ActionRule("Otherwise, flight can be cancelled if any of the following is true", frozenset({"cancel_reservation"}), _cancellation),
        ActionRule("Basic economy flights cannot be modified.", frozenset({"update_reservation_flights"}), _flights_change),
        ActionRule("Do not add checked bags that the user does not need.", frozenset({"update_reservation_baggages", "book_reservation"}),
                   _bags),
        ActionRule("Each reservation can use at most one travel certificate",
                   frozenset({"book_reservation", "update_reservation_flights", "update_reservation_baggages"}), _payment),
        ActionRule("The agent needs to collect the first name, last name, and date of birth for each passenger.",
                   frozenset({"book_reservation", "update_reservation_passengers"}), _passenger_birthdates),
        ActionRule("Always confirms the facts before offering compensation.", frozenset({"send_certificate"}), _certificate),
    ),
    conversation_rules=(
        ConversationRule("Only compensate if the user is a silver/gold member or has travel insurance or flies business.",
                         _compensation_offers),
        ConversationRule("There are three membership levels", _membership_claims),
        ConversationRule("If the user doesn't know their reservation id, the agent should help locate it using available tools.",
                         _unread_reservation_claims),
    ),
    derived=frozenset({"flights", "nonfree_baggages", "amount", "payment_methods"}),
    preconditions_always=True,
)
