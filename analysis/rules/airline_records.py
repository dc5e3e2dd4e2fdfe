"""What the airline records a run read say: reservations, the user's profile, flight statuses, and
what the policy decides from them (whether a reservation may be cancelled, whether the user may be
compensated). Shared by the rules over writes (`airline`) and over what the agent says
(`airline_offers`). "Now" is the policy's own "The current time is ..." line.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from tracegym.analysis.rules.conversation import Conversation, dicts
from tracegym.analysis.rules.domain import Finding

COVERED = re.compile(
    r"\b(sick|ill|illness|unwell|not feeling well|health|medical|hospital\w*|surgery|injur\w*|doctor|fever|"
    r"flu|covid|emergency room|weather|storm|hurricane|snow\w*|flood\w*|blizzard)\b",
    re.IGNORECASE,
)
CERTIFICATE_PER_PASSENGER = {"cancelled": 100, "delayed": 50}  # the policy's gesture amounts, in dollars
SAID_FLOWN = re.compile(
    r"\b(?:flown|already (?:departed|took off|taken off|taken place|travell?ed|used|happened|completed|left)|"
    r"in the past|(?:date|flight)s? (?:has|have) (?:already )?passed)\b",
    re.IGNORECASE,
)


def reservation(
    conversation: Conversation, reservation_id: Any, before: int | None, first: bool = False
) -> dict | None:
    """The reservation record read before `before` (the latest, or with `first` the initial one),
    with the cabin and flights of any flight change among `conversation.prior` applied."""
    record = conversation.record("reservation_id", reservation_id, before, first=first, with_key="flights")
    for action in conversation.prior:
        arguments = action.get("arguments") or {}
        if (
            record is not None
            and action.get("name") == "update_reservation_flights"
            and arguments.get("reservation_id") == reservation_id
        ):
            record = {
                **record,
                "cabin": arguments.get("cabin", record.get("cabin")),
                "flights": arguments.get("flights") or record.get("flights"),
            }
    return record


def reservations(conversation: Conversation, before: int | None) -> list[dict]:
    """Every reservation record (one with flights) read before `before`, in order."""
    return [obj for _, obj in conversation.records("reservation_id", before) if "flights" in obj]


def user(conversation: Conversation, before: int | None, user_id: Any = None) -> dict | None:
    """The user profile read before `before` (of `user_id` when given)."""
    found = [
        obj for _, obj in conversation.records("membership", before) if user_id is None or obj.get("user_id") == user_id
    ]
    return found[-1] if found else None


def flight_status(conversation: Conversation, flight: dict, before: int) -> str | None:
    statuses = [
        c.output
        for c in conversation.agent_calls
        if c.name == "get_flight_status"
        and c.index < before
        and c.arguments.get("flight_number") == flight.get("flight_number")
        and c.arguments.get("date") == flight.get("date")
        and isinstance(c.output, str)
    ]
    return statuses[-1].strip().lower() if statuses else None


def undisrupted_statuses(conversation: Conversation, before: int) -> list[str]:
    """The flight statuses the agent checked before message `before` when none shows a delay or a
    cancellation (the facts a gesture needs are then not confirmed); [] when none was checked or one
    does."""
    statuses = [
        str(c.output).strip().lower()
        for c in conversation.agent_calls
        if c.name == "get_flight_status" and not c.error and c.index < before
    ]
    return [] if any(s in ("delayed", "cancelled") for s in statuses) else statuses


def flown(conversation: Conversation, record: dict, before: int) -> dict | None:
    """The first flight of `record` already flown (dated before today, or reported landed/flying)."""
    today = conversation.now
    for flight in dicts(record.get("flights")):
        status = flight_status(conversation, flight, before)
        if status in ("landed", "flying") or (today and str(flight.get("date")) < today.date().isoformat()):
            return flight
    return None


def flown_unnoticed(conversation: Conversation, record: dict, before: int) -> dict | None:
    """The flight of `record` already flown, when no agent message before `before` said a flight
    was flown or in the past: an agent that then cancels or promises a refund read the dates as
    upcoming (a misreading), not a rule it knowingly broke."""
    gone = flown(conversation, record, before)
    if gone is None or any(SAID_FLOWN.search(text) for _, text in conversation.texts("assistant", 0, before)):
        return None
    return gone


def unflown_reading(record: dict, gone: dict, index: int) -> Finding:
    """The data-reasoning finding of acting on `record` as if its flown flight `gone` were upcoming."""
    return Finding(
        "structured_data_reasoning",
        index,
        f"treats {record.get('reservation_id')} as upcoming, but flight "
        f"{gone.get('flight_number')} on {gone.get('date')} was already flown",
    )


def cancellation_refused(conversation: Conversation, record: dict, before: int) -> tuple[str, bool] | None:
    """Why the policy forbids cancelling `record` as the run shows it before `before`, and whether
    the reason is a flown flight (then the agent cannot help and transfers); None when one of the
    four conditions allows it (booked within 24 hours, a flight cancelled by the airline, business
    cabin, insurance with a health or weather reason the user gave)."""
    rid = record.get("reservation_id")
    if (gone := flown(conversation, record, before)) is not None:
        return (
            f"cancel_reservation({rid}): flight {gone.get('flight_number')} on {gone.get('date')} was already flown",
            True,
        )
    today, created = conversation.now, _moment(record.get("created_at"))
    recent = bool(today and created and created >= today - timedelta(hours=24))
    cancelled = any(flight_status(conversation, f, before) == "cancelled" for f in dicts(record.get("flights")))
    insured = record.get("insurance") == "yes" and COVERED.search(conversation.user_text(before))
    if recent or cancelled or record.get("cabin") == "business" or insured:
        return None
    return (
        f"cancel_reservation({rid}): booked {record.get('created_at')} (over 24 h before now), "
        f"cabin {record.get('cabin')}, "
        f"insurance {record.get('insurance')}, no airline cancellation, "
        + ("no health or weather reason given" if record.get("insurance") == "yes" else "no insurance")
    ), False


def _moment(value: Any) -> datetime | None:
    """An ISO date and time read from a record; None for anything else."""
    try:
        return datetime.fromisoformat(value).replace(tzinfo=None) if isinstance(value, str) else None
    except ValueError:
        return None


def may_compensate(profile: dict, read: list[dict]) -> bool:
    """Silver or gold members, and users with insurance or a business reservation among `read`."""
    return profile.get("membership") in ("silver", "gold") or any(
        r.get("insurance") == "yes" or r.get("cabin") == "business" for r in read
    )
