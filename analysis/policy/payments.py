"""How a payment method can be named in a conversation (airline and retail profiles alike)."""

from __future__ import annotations

from typing import Any

from tracegym.analysis.policy.conversation import Conversation


def payment_words(conversation: Conversation, payment_id: Any) -> tuple[str, ...]:
    """Ways an agent names payment method `payment_id` when listing it for confirmation: the id, its
    kind ("credit card", "gift card", "paypal", ...), and the brand and last four digits that the
    profile read shows; () without an id."""
    if not payment_id:
        return ()
    words = [str(payment_id), str(payment_id).rsplit("_", 1)[0].replace("_", " ")]
    for _, profile in conversation.records("payment_methods"):
        methods = profile.get("payment_methods")
        method = methods.get(payment_id) if isinstance(methods, dict) else next(
            (m for m in methods or [] if isinstance(m, dict) and m.get("id") == payment_id), None)
        if isinstance(method, dict):
            words += [str(method[k]) for k in ("brand", "last_four") if method.get(k)]
            if method.get("source"):
                words.append(str(method["source"]).replace("_", " "))
    return tuple(dict.fromkeys(words))
