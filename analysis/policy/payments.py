"""How a payment method can be named in a conversation (airline and retail profiles alike)."""

from __future__ import annotations

from typing import Any

from tracegym.analysis.policy.conversation import Conversation, dicts


def describe_payment(conversation: Conversation, payment_id: Any) -> tuple[str, ...]:
    """The words a profile read gives payment method `payment_id`: its kind ("credit card",
    "gift card", "paypal"), brand and last four digits; () for anything not in a profile."""
    for _, profile in conversation.records("payment_methods"):
        methods = profile.get("payment_methods")
        method = methods.get(str(payment_id)) if isinstance(methods, dict) else next(
            (m for m in dicts(methods) if m.get("id") == payment_id), None)
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
