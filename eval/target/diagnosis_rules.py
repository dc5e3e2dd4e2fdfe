"""The hotel desk's diagnosis rules: the declaration `domain.toml` beside this module (every rule's
sentence checked against the handbook) and one rule that needs code (M2 on a room change the guest
declines: the extra charge told against the hotel's current rate). `tracegym diagnose` finds
`DOMAIN` through the `tracegym.domains` entry point named "hotel" (pyproject.toml), as it finds a
user's installed domain."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from tracegym.analysis.rules.conversation import Conversation, mentions
from tracegym.analysis.rules.declared import load_declaration
from tracegym.analysis.rules.declared_checks import as_number, quoted, stated_amounts
from tracegym.analysis.rules.domain import ConversationRule, Finding
from tracegym.eval.target.handbook import HANDBOOK

DECLARATION = Path(__file__).with_name("domain.toml")
M2 = "Tell the guest the extra charge (new total minus old total) before confirming."
_EXTRA = re.compile(r"\b(?:extra|additional|difference)\b", re.IGNORECASE)


def _reservation(conversation: Conversation, text: str, before: int) -> dict | None:
    """The reservation `text` names (else the latest read) as read before message `before`."""
    read = [obj for _, obj in conversation.records("reservation_id", before) if {"nights", "total"} <= obj.keys()]
    named = [obj for obj in read if mentions(text, obj["reservation_id"])]
    return (named or read or [None])[-1]


def proposed_extra_charges(conversation: Conversation) -> Iterator[Finding]:
    """An extra charge told for a room change that was not made (the guest declined or the agent
    stopped): it must be the reservation's nights x the hotel's current rate for a room type the
    message names, minus the reservation's total (a change that was made is checked against its
    result by the declared rule)."""
    changes = [c.index for c in conversation.agent_calls if c.name == "change_room_type" and not c.error]
    texts = conversation.texts("assistant")
    for position, (index, text) in enumerate(texts):
        high = texts[position + 1][0] if position + 1 < len(texts) else len(conversation.messages)
        stated = [amount for amount, _ in stated_amounts(text, _EXTRA)]
        if not stated or any(index < at < high for at in changes):
            continue
        record = _reservation(conversation, text, index)
        hotel = conversation.record("hotel_id", record.get("hotel_id"), index, with_key="rates") if record else None
        rates = hotel.get("rates") if hotel else None
        if not isinstance(rates, dict):
            continue
        expected = [
            rate * record["nights"] - record["total"]
            for room, value in rates.items()
            if room != record.get("room_type") and mentions(text, room) and (rate := as_number(value)) is not None
        ]
        if expected and not any(abs(s - e) < 0.005 for s in stated for e in expected):
            yield Finding(
                "structured_data_reasoning",
                index,
                f"states an extra charge of {stated[0]:,.2f} where nights x the current rate minus the total "
                f"comes to {expected[0]:,.2f}; the policy: {quoted(M2)}: {text.strip()}",
            )
            return


_DECLARED = load_declaration(DECLARATION, policy=HANDBOOK)
DOMAIN = replace(
    _DECLARED,
    conversation_rules=(*_DECLARED.conversation_rules, ConversationRule(M2, proposed_extra_charges)),
    origin=f"{DECLARATION} and {__name__}",
)
