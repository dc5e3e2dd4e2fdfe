"""Amounts the agent states as what a change costs or refunds, against what the system charged.

A write's charge is read from the record it returns: the entries its `payment_history` gained over
the same record as last read before the write (a new booking: all of them). An agent message that
states a charge, refund or price difference ("the difference is $495", "refund: $1,515") is checked
against the writes made between the agent's previous message and its next one, i.e. the writes it
proposes or reports: when a message states a charge, and none of the amounts it names (the stated
one or any other, as in "$5,700 - $456 = $5,244" or "$209 charged") is any of their charges (their total, one
payment of it, or, where the message speaks of shares ("per passenger", "each", "× 2"), that
divided among up to `PER_PERSON` passengers; the charges, or the refunds, of all those writes
together), the agent told the user an amount the data did not support. Amounts are compared to
the cent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tracegym.analysis.rules.conversation import Call, Conversation
from tracegym.analysis.rules.domain import Domain, Finding

PER_PERSON = 9  # a stated amount may be a charge divided among this many passengers at most
_SHARE = re.compile(
    r"\b(?:per|each|every)\b|/\s?(?:person|passenger|traveler|pax)\b|\b(?:x|×)\s?\d|\d\s?(?:x|×)", re.IGNORECASE
)  # the message speaks of shares: a stated amount may be one
_STATED = re.compile(
    r"\b(?:difference|charge[sd]?|charging|refund(?:ed)?|due(?! to)|additional|owe|pay|cost (?:of|for) "
    r"(?:the|these|this|your) (?:change|upgrade|modification)s?)\b[^$\n]{0,40}?\$\s?(\d[\d,]*(?:\.\d+)?)",
    re.IGNORECASE,
)
_AMOUNT = re.compile(r"\$\s?(\d[\d,]*(?:\.\d+)?)")  # any amount the message names ("$5,700 - $456 = $5,244")


def _history(value: Any) -> list | None:
    history = value.get("payment_history") if isinstance(value, dict) else None
    return history if isinstance(history, list) else None


def payments(conversation: Conversation, domain: Domain, call: Call) -> list[float]:
    """The signed amounts (in currency units) of the payment entries a successful write added to its
    record; empty when its result records no payments."""
    after = _history(call.output)
    key = next((k for k in domain.record_keys if k in (call.output or {})), None) if after is not None else None
    if after is None:
        return []
    before = conversation.record(key, call.output[key], call.index, with_key="payment_history") if key else None
    new = after[len(_history(before) or []) :]
    return [p["amount"] for p in new if isinstance(p, dict) and isinstance(p.get("amount"), (int, float))]


def charges(conversation: Conversation, domain: Domain, made: list[Call]) -> set[float]:
    """The amounts (absolute) the writes `made` charged or refunded: each new payment entry, each
    write's sum, and the charges and the refunds of all of them together."""
    each = [payments(conversation, domain, call) for call in made]
    every = [amount for amounts in each for amount in amounts]
    together = [sum(a for a in every if a > 0), sum(a for a in every if a < 0)]
    return {round(abs(a), 2) for a in every + [sum(amounts) for amounts in each if amounts] + together if a}


def misquoted_charges(conversation: Conversation, domain: Domain) -> Iterator[Finding]:
    """Agent messages stating a charge or refund that none of the writes they propose or report made."""
    writes = [c for c in conversation.agent_calls if domain.is_write(c.name) and not c.error]
    texts = conversation.texts("assistant")
    for position, (index, text) in enumerate(texts):
        stated = {round(float(m.replace(",", "")), 2) for m in _STATED.findall(text)}
        if not stated or not writes:
            continue
        low = texts[position - 1][0] if position else -1
        high = texts[position + 1][0] if position + 1 < len(texts) else len(conversation.messages)
        made = [c for c in writes if low < c.index < high]
        charged = charges(conversation, domain, made)
        shares = range(1, PER_PERSON + 1) if _SHARE.search(text) else (1,)
        named = {round(float(m.replace(",", "")), 2) for m in _AMOUNT.findall(text)}  # the stated amounts among them
        if charged and not any(abs(s - c / k) < 0.005 for s in named for c in charged for k in shares):
            shown = ", ".join(f"${s:,.2f}" for s in sorted(stated))
            yield Finding(
                "structured_data_reasoning",
                index,
                f"states {shown}, but {', '.join(c.name for c in made)} "
                f"charged or refunded {', '.join(f'${c:,.2f}' for c in sorted(charged))}: "
                f"{text}",
            )
            return
