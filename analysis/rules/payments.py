"""How a payment method can be named in a conversation (airline and retail profiles alike), and
an agent that speaks of a kind of method the user's profile does not hold."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tracegym.analysis.rules.conversation import Conversation, dicts, negated, sentences
from tracegym.analysis.rules.domain import Finding

ORIGINAL_PAYMENT = (
    "original payment method",
    "original payment",
    "same payment method",
)  # a method named by its history
# "your gift card", "your existing PayPal gift card": the last kind named within two words wins
_YOUR_METHOD = re.compile(r"\byour (?:[\w-]+ ){0,2}(gift card|credit card|paypal|certificate)\b", re.IGNORECASE)


def describe_payment(conversation: Conversation, payment_id: Any) -> tuple[str, ...]:
    """The words a profile read gives payment method `payment_id`: its kind ("credit card",
    "gift card", "paypal"), brand and last four digits; () for anything not in a profile."""
    for _, profile in conversation.records("payment_methods"):
        methods = profile.get("payment_methods")
        method = (
            methods.get(str(payment_id))
            if isinstance(methods, dict)
            else next((m for m in dicts(methods) if m.get("id") == payment_id), None)
        )
        if isinstance(method, dict):
            words = [str(method["source"]).replace("_", " ")] if method.get("source") else []
            return tuple(words + [str(method[k]) for k in ("brand", "last_four") if method.get(k)])
    return ()


def payment_words(conversation: Conversation, payment_id: Any) -> tuple[str, ...]:
    """Ways an agent names payment method `payment_id` when listing it for confirmation: the id, the
    kind its id spells ("credit_card_1" is a credit card) and `describe_payment`; () without an id."""
    if not payment_id:
        return ()
    words = [str(payment_id), str(payment_id).rsplit("_", 1)[0].replace("_", " ")]
    return tuple(dict.fromkeys(words + list(describe_payment(conversation, payment_id))))


def held_methods(conversation: Conversation, stop: int) -> list[dict]:
    """Every payment method (a dict with its "source", "amount", ...) of the profiles read before
    message `stop`."""
    methods = [profile.get("payment_methods") for _, profile in conversation.records("payment_methods", stop)]
    return [m for held in methods for m in dicts(list(held.values()) if isinstance(held, dict) else held)]


def _held_kinds(conversation: Conversation, stop: int) -> set[str]:
    """The kinds ("gift_card", "credit_card", "paypal", "certificate") of every payment method the
    profiles read before message `stop` hold."""
    return {str(m["source"]) for m in held_methods(conversation, stop) if m.get("source")}


def unheld_methods(conversation: Conversation) -> Iterator[Finding]:
    """An agent sentence that speaks of the user's gift card, credit card, PayPal or certificate when
    the profiles read before it hold no method of that kind: a fact the records contradict (data
    reasoning). A negated sentence ("you have no gift card") claims no such method; nothing is
    judged before a profile was read. One finding, at the first such sentence."""
    for index, text in conversation.texts("assistant"):
        held = _held_kinds(conversation, index)
        if not held:
            continue
        for sentence in sentences(text):
            named = [m.group(1).lower().replace(" ", "_") for m in _YOUR_METHOD.finditer(sentence)]
            missing = [kind for kind in named if kind not in held]
            if missing and not negated(sentence):
                yield Finding(
                    "structured_data_reasoning",
                    index,
                    f"speaks of the user's {missing[0].replace('_', ' ')}, "
                    f"but the profile holds only {', '.join(sorted(held))}: "
                    f"{sentence!r}",
                )
                return
