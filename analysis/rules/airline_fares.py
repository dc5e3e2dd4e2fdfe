"""Airline fares the agent states, checked against the flight searches and reservations it read.

An option is one flight of a direct search or one connection of a one-stop search; its fare in a
cabin is the sum of its flights' prices there, and it counts only where every flight has a seat in
that cabin. An agent message that calls an option the cheapest (or lowest-priced), names exactly
one option by its flight numbers and names the cabin, while a search of the same route and date
read before it lists a cheaper option with seats, misread the data (structured data reasoning).
A user who set a time or stop condition may have ruled the cheaper option out, so such runs are
left alone.

A price difference is between fares: an agent message that states, on a line about a difference, an
upgrade or an additional charge (and no sum: "$161 + $209 upgrade" adds payments up), an amount
equal to another amount it states minus what a reservation it read was paid, where that payment is
not the reservation's fare (insurance or bags were paid on top), computed the difference from the
wrong basis (structured data reasoning).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tracegym.analysis.rules.airline_records import reservations
from tracegym.analysis.rules.conversation import Conversation, assertions, dicts, listed, mentions
from tracegym.analysis.rules.domain import Finding

SEARCHES = frozenset({"search_direct_flight", "search_onestop_flight"})
_WORDS = ("cheapest", "lowest", "least expensive")  # every match of _CHEAPEST holds one; messages without are skipped
_CHEAPEST = re.compile(r"\b(?:cheapest|lowest[- ]pric\w*|least expensive|lowest fare)\b", re.IGNORECASE)
_CABINS = (
    ("basic_economy", re.compile(r"\bbasic economy\b", re.IGNORECASE)),
    ("economy", re.compile(r"(?<!basic )\beconomy\b", re.IGNORECASE)),
    ("business", re.compile(r"\bbusiness\b", re.IGNORECASE)),
)
_CONDITIONS = re.compile(
    r"\b\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.)|\b(?:morning|afternoon|evening|night|noon|nonstop|"
    r"non-stop|direct|layover|connection|o'clock)\b",
    re.IGNORECASE,
)

_DIFFERENCE = re.compile(
    r"difference|upgrad|additional", re.IGNORECASE
)  # also inside JSON keys: estimated_additional_collection
_NUMBER = r"((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)(?!\w|,\d)"  # 1,746 / 725 / 12.50
_AMOUNT = re.compile(r"(?<![\w.,])" + _NUMBER)
_PRICED = re.compile(r"(?:\$\s?|:\s*\**\$?)" + _NUMBER)  # "$1,113", '"collection": 192'
Option = tuple[tuple[str, ...], tuple[Any, ...], list[dict]]  # flight numbers, the search's route and date, flights


def _options(conversation: Conversation, before: int) -> list[Option]:
    """Every option the flight searches read before `before` listed."""
    found = []
    for call in conversation.agent_calls:
        if call.name not in SEARCHES or call.error or call.result_index is None or call.result_index >= before:
            continue
        search = tuple(call.arguments.get(k) for k in ("origin", "destination", "date"))
        for entry in listed(call.output):
            flights = dicts(entry) if isinstance(entry, list) else [entry] if isinstance(entry, dict) else []
            if flights:
                found.append((tuple(str(f.get("flight_number")) for f in flights), search, flights))
    return found


def _fare(flights: list[dict], cabin: str) -> float | None:
    """The option's fare in `cabin`, or None where a flight has no seat or no price there."""
    total = 0.0
    for flight in flights:
        prices, seats = flight.get("prices"), flight.get("available_seats")
        price = prices.get(cabin) if isinstance(prices, dict) else None
        if not isinstance(price, (int, float)) or (isinstance(seats, dict) and not (seats.get(cabin) or 0) > 0):
            return None
        total += price
    return total


def cheapest_claims(conversation: Conversation) -> Iterator[Finding]:
    """An option called the cheapest while a search of its route and date shows a cheaper one."""
    for index, text in conversation.texts("assistant"):
        lowered = text.lower()
        if not any(word in lowered for word in _WORDS) or not any(_CHEAPEST.search(c) for c in assertions(text)):
            continue
        if _CONDITIONS.search(conversation.user_text()):
            return
        cabin = next((name for name, pattern in _CABINS if pattern.search(text)), None)
        options = _options(conversation, index)
        named = {o[0]: o for o in options if all(mentions(text, number) for number in o[0])}
        if cabin is None or len(named) != 1:
            continue
        numbers, search, flights = next(iter(named.values()))
        fare = _fare(flights, cabin)
        rivals = [(f, o[0]) for o in options if o[1] == search and (f := _fare(o[2], cabin)) is not None]
        if fare is not None and rivals and min(rivals)[0] < fare:
            cheaper, which = min(rivals)
            yield Finding(
                "structured_data_reasoning",
                index,
                f"calls {'+'.join(numbers)} (${fare:g} in {cabin}) the cheapest, "
                f"but the search read lists {'+'.join(which)} at ${cheaper:g}",
            )
            return


def _amounts(pattern: re.Pattern, text: str) -> set[float]:
    return {float(m.replace(",", "")) for m in pattern.findall(text)}


def _paid_and_fare(record: dict) -> tuple[float, float] | None:
    """(amount paid, fare: flight prices × passengers) of a reservation record; None if unreadable."""
    payments = [p.get("amount") for p in dicts(record.get("payment_history"))]
    prices = [f.get("price") for f in dicts(record.get("flights"))]
    passengers = len(listed(record.get("passengers")))
    if not payments or not prices or not passengers or not all(isinstance(v, (int, float)) for v in payments + prices):
        return None
    return float(sum(payments)), float(sum(prices) * passengers)


def paid_as_fare(conversation: Conversation) -> Iterator[Finding]:
    """A price difference stated as a new amount minus what a reservation was paid, where the payment
    included more than the fare."""
    for index, text in conversation.texts("assistant"):
        if not _DIFFERENCE.search(text):
            continue
        amounts = _amounts(_AMOUNT, text)
        stated = set().union(
            *(_amounts(_PRICED, line) for line in text.splitlines() if _DIFFERENCE.search(line) and "+" not in line)
        )
        for record in reservations(conversation, index):
            basis = _paid_and_fare(record)
            if basis is None or basis[0] <= 0 or abs(basis[0] - basis[1]) < 0.01:
                continue
            paid, fare = basis
            wrong = sorted(
                (new, new - paid)
                for new in amounts
                if new - paid > 0 and new - paid in stated and new - fare not in amounts
            )
            if wrong:
                new, difference = wrong[-1]
                yield Finding(
                    "structured_data_reasoning",
                    index,
                    f"difference ${difference:g} = ${new:g} − ${paid:g}, what "
                    f"{record.get('reservation_id')} was paid; its fare is ${fare:g}",
                )
                return
