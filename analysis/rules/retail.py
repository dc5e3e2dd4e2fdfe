"""τ²-bench retail policy as executable checks over the orders, products and profile the tools showed.

Each rule names the policy sentence it implements (policy.md of the retail domain); rules over one
write apply to the agent's writes and to the gold actions alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tracegym.analysis.rules import procedures
from tracegym.analysis.rules.conversation import Call, Conversation, dicts, listed
from tracegym.analysis.rules.domain import ActionRule, ConversationRule, Domain, Finding
from tracegym.analysis.rules.payments import ORIGINAL_PAYMENT, payment_words

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
AUTHENTICATION = frozenset({"find_user_id_by_email", "find_user_id_by_name_zip"})
PENDING_ONLY = frozenset(
    {
        "cancel_pending_order",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
    }
)
DELIVERED_ONLY = frozenset({"return_delivered_order_items", "exchange_delivered_order_items"})
ONCE_PER_ORDER = frozenset({"modify_pending_order_items", "exchange_delivered_order_items"})
WRITES = PENDING_ONLY | DELIVERED_ONLY | {"modify_user_address"}
ALL_ITEMS = (
    "all items",
    "all the items",
    "all of the items",
    "every item",
    "everything",
)  # how a whole-order return is named


def order(conversation: Conversation, order_id: Any, before: int, first: bool = False) -> dict | None:
    return conversation.record("order_id", order_id, before, first=first, with_key="status")


def describe(conversation: Conversation, item_id: Any) -> list[Any]:
    """The words that name an item: its product name and option values, from any record read."""
    words: list[Any] = []
    for _, obj in conversation.records("item_id"):
        if str(obj.get("item_id")) == str(item_id):
            options = obj.get("options")
            words += [obj.get("name"), *(options.values() if isinstance(options, dict) else ())]
    return list(
        dict.fromkeys(w for w in words if isinstance(w, (str, int, float)) and not isinstance(w, bool) and str(w))
    )


def _status(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    record = order(conversation, arguments.get("order_id"), before, first=True)
    wanted = "pending" if name in PENDING_ONLY else "delivered"
    if record is not None and record.get("status") != wanted:
        yield Finding(
            "policy_compliance",
            before,
            f"{name}({record['order_id']}): the order is {record.get('status')!r}, "
            f"the policy allows this only for {wanted} orders",
        )


def _cancel_reason(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    if str(arguments.get("reason", "")).lower() not in CANCEL_REASONS:
        yield Finding(
            "policy_compliance",
            before,
            f"{name}: reason {arguments.get('reason')!r} is not one the policy accepts ({' or '.join(CANCEL_REASONS)})",
        )


def _refund_method(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    record = order(conversation, arguments.get("order_id"), before, first=True)
    method = str(arguments.get("payment_method_id", ""))
    if record is None or method.startswith("gift_card"):
        return
    original = {
        str(p.get("payment_method_id"))
        for p in dicts(record.get("payment_history"))
        if p.get("transaction_type") == "payment"
    }
    if original and method not in original:
        yield Finding(
            "policy_compliance",
            before,
            f"{name}({record['order_id']}): refund to {method}, neither the "
            f"original payment ({', '.join(sorted(map(str, original)))}) nor a gift card",
        )


def _new_items(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """Each new item an available variant of the product it replaces."""
    variants = {str(obj["item_id"]): obj for _, obj in conversation.records("available", before) if "item_id" in obj}
    product_of = {
        str(obj["item_id"]): obj.get("product_id")
        for _, obj in conversation.records("product_id", before)
        if "item_id" in obj
    }
    for variant_id in listed(arguments.get("new_item_ids")):
        variant = variants.get(str(variant_id))
        if variant is not None and variant.get("available") is False:
            yield Finding(
                "structured_data_reasoning",
                before,
                f"{name}: new item {variant_id} is not available ({variant.get('options')})",
            )
    for old, new in zip(listed(arguments.get("item_ids")), listed(arguments.get("new_item_ids"))):
        products = [product_of.get(str(old)), _product_of_variant(conversation, new, before)]
        if None not in products and len(set(map(str, products))) > 1:
            yield Finding("policy_compliance", before, f"{name}: item {old} replaced by {new} of another product type")


def _product_of_variant(conversation: Conversation, item_id: Any, before: int) -> Any:
    for _, obj in conversation.records("variants", before):
        if isinstance(obj.get("variants"), dict) and str(item_id) in obj["variants"]:
            return obj.get("product_id")
    return None


def _authenticated_first(conversation: Conversation) -> Iterator[Finding]:
    """The user's identity found by email or name and zip before any change."""
    for call in conversation.agent_calls:
        if call.name in AUTHENTICATION and not call.error:
            return
        if call.name in WRITES:
            yield Finding(
                "policy_compliance",
                call.index,
                f"{call.name} before the user was authenticated by email or name and zip",
            )
            return


def _once_per_order(conversation: Conversation) -> Iterator[Finding]:
    done: set[tuple[str, str]] = set()
    for call in conversation.agent_calls:
        if call.name in ONCE_PER_ORDER and not call.error:
            key = (call.name, str(call.arguments.get("order_id")))
            if key in done:
                yield Finding("policy_compliance", call.index, f"{call.name} a second time on order {key[1]}")
            done.add(key)


def confirmation(call: Call, conversation: Conversation) -> list[tuple[Any, ...]] | None:
    """What the agent must have listed before the user's yes (None: not a database update): the
    order and reason of a cancellation, the new address, the new items (the payment for a price
    difference may stay implicit), the returned items and the refund method, the new payment."""
    arguments = call.arguments
    pay = payment_words(conversation, arguments.get("payment_method_id"))
    details: list[tuple[Any, ...]] = []
    if call.name == "cancel_pending_order":
        details += [(arguments.get("order_id"),), (arguments.get("reason"),)]
    elif call.name in ("modify_pending_order_address", "modify_user_address"):
        details.append((arguments.get("address1"), arguments.get("zip")))
    elif call.name in ONCE_PER_ORDER:
        return [(item, *describe(conversation, item)) for item in listed(arguments.get("new_item_ids"))]
    elif call.name == "return_delivered_order_items":
        details += [(item, *describe(conversation, item), *ALL_ITEMS) for item in listed(arguments.get("item_ids"))]
        pay += ORIGINAL_PAYMENT
    elif call.name != "modify_pending_order_payment":
        return None
    return details + ([pay] if pay else [])


DOMAIN = Domain(
    name="retail",
    writes=WRITES,
    reads=AUTHENTICATION
    | {
        "get_user_details",
        "get_order_details",
        "get_product_details",
        "get_item_details",
        "list_all_product_types",
        "calculate",
    },  # τ²-bench's READ tools, and calculate
    record_keys=("order_id", "user_id"),
    confirmation=confirmation,
    confirmation_policy="you must list the action details and obtain explicit user confirmation (yes) to proceed",
    action_rules=(
        ActionRule(
            "Generally, you can only take action on pending or delivered orders.",
            WRITES - {"modify_user_address"},
            _status,
        ),
        ActionRule(
            "The user needs to confirm the order id and the reason (either 'no longer needed' or 'ordered by mistake')",
            frozenset({"cancel_pending_order"}),
            _cancel_reason,
        ),
        ActionRule(
            "The refund must either go to the original payment method, or an existing gift card.",
            frozenset({"return_delivered_order_items"}),
            _refund_method,
        ),
        ActionRule(
            "each item can be modified to an available new item of the same product", ONCE_PER_ORDER, _new_items
        ),
    ),
    conversation_rules=(
        ConversationRule(
            "you have to authenticate the user identity by locating their user id via email, or via name + zip code",
            _authenticated_first,
        ),
        ConversationRule("Exchange or modify order tools can only be called once per order.", _once_per_order),
        procedures.RULE,
    ),
    derived=frozenset({"new_item_ids", "item_ids"}),
    expand=describe,
    preconditions_always=True,
)
