"""τ²-bench telecom policy as executable checks over the customer, line and bill records the tools showed.

The line an agent works on must be the one with the phone number the user gave; bills are checked
overdue before a payment request and paid before a suspension is lifted; refuels are at most 2 GB
and their price is confirmed first. Each rule names the policy sentence it implements.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from tracegym.analysis.policy.conversation import Call, Conversation
from tracegym.analysis.policy.domain import ActionRule, ConversationRule, Domain, Finding

PHONE = re.compile(r"\b\d{3}-\d{3}-\d{4}\b")
LINE_WRITES = frozenset({"suspend_line", "resume_line", "enable_roaming", "disable_roaming", "refuel_data"})
WRITES = LINE_WRITES | {"send_payment_request"}
REFUEL_LIMIT_GB = 2
PRICE_WORDS = ("$", "price", "cost", "costs", "charge", "charged", "fee", "per gb", "/gb")
_RIGHT_LINE = "Apply the refueled data to the line associated with the phone number the user provided."


def user_numbers(conversation: Conversation, before: int | None = None) -> set[str]:
    return set(PHONE.findall(conversation.user_text(before)))


def line_numbers(conversation: Conversation) -> dict[str, str]:
    """{line id: phone number} from every line record the tools showed."""
    return {str(obj["line_id"]): str(obj["phone_number"]) for _, obj in conversation.records("phone_number")
            if "line_id" in obj}


def _right_line(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    numbers, wanted = line_numbers(conversation), user_numbers(conversation, before)
    number = numbers.get(str(arguments.get("line_id")))
    if wanted and number and number not in wanted:
        yield Finding("tool_calling_precision", before, f"{name} on line {arguments.get('line_id')} ({number}); the user's "
                                                        f"number is {', '.join(sorted(wanted))}")


def _refuel_limit(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    amount = arguments.get("gb_amount")
    if isinstance(amount, (int, float)) and amount > REFUEL_LIMIT_GB:
        yield Finding("policy_compliance", before, f"refuel_data of {amount} GB; at most {REFUEL_LIMIT_GB} GB")


def _bills(conversation: Conversation, before: int) -> list[dict]:
    return [obj for _, obj in conversation.records("bill_id", before) if "status" in obj]


def _overdue_checked(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    bill = [b for b in _bills(conversation, before) if str(b.get("bill_id")) == str(arguments.get("bill_id"))]
    if not bill or str(bill[-1].get("status")).lower() != "overdue":
        shown = bill[-1].get("status") if bill else "never read"
        yield Finding("precondition_verification", before, f"send_payment_request({arguments.get('bill_id')}) without the "
                                                           f"bill shown overdue (status: {shown})")


def _resume_allowed(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    line = conversation.record("line_id", arguments.get("line_id"), before, with_key="contract_end_date")
    today = conversation.now
    if line and today and str(line.get("contract_end_date")) < today.date().isoformat():
        yield Finding("policy_compliance", before, f"resume_line({arguments.get('line_id')}): contract ended "
                                                   f"{line.get('contract_end_date')}")
    latest = {str(b.get("bill_id")): str(b.get("status")).lower() for b in _bills(conversation, before)}
    unpaid = [bill for bill, status in latest.items() if status in ("overdue", "awaiting payment")]
    if unpaid:
        yield Finding("precondition_verification", before, f"resume_line({arguments.get('line_id')}) while bill "
                                                           f"{unpaid[-1]} was last shown unpaid")


def _wrong_line_read(conversation: Conversation) -> Iterator[Finding]:
    """Telling the user about lines none of which has the number the user gave."""
    numbers = line_numbers(conversation)
    reads = [(c.index, numbers[str(c.arguments.get("line_id") or c.arguments.get("id"))]) for c in conversation.agent_calls
             if str(c.arguments.get("line_id") or c.arguments.get("id")) in numbers and not c.error]
    for index, text in conversation.texts("assistant"):
        read = {number for at, number in reads if at < index}
        wanted = user_numbers(conversation, index)
        if read and wanted:
            if not wanted & read:
                yield Finding("structured_data_reasoning", index, f"read line(s) {', '.join(sorted(read))}, not the "
                                                                  f"user's {', '.join(sorted(wanted))}, then says: {text}")
            return


def confirmation(call: Call, conversation: Conversation) -> list[tuple[Any, ...]] | None:
    if call.name == "refuel_data":
        return [(call.arguments.get("gb_amount"),), PRICE_WORDS]
    return None


DOMAIN = Domain(
    name="telecom",
    writes=WRITES,
    record_keys=("customer_id", "line_id"),
    confirmation=confirmation,
    confirmation_policy="Confirm the price",
    action_rules=(
        ActionRule(_RIGHT_LINE, LINE_WRITES, _right_line),
        ActionRule("The maximum amount of data that can be refueled is 2GB.", frozenset({"refuel_data"}), _refuel_limit),
        ActionRule("You should always check that the bill is overdue before sending a payment request.",
                   frozenset({"send_payment_request"}), _overdue_checked),
        ActionRule("You are allowed to lift the suspension after the user has paid all their overdue bills.",
                   frozenset({"resume_line"}), _resume_allowed),
    ),
    conversation_rules=(ConversationRule(_RIGHT_LINE, _wrong_line_read),),
    workflow=True,
)
