"""τ²-bench telecom policy as executable checks over the customer, line and bill records the tools showed.

The line an agent works on must be the one with the phone number the user gave (a write to another
line it read is a wrong-record write chosen by misreading the records: tool-calling precision and
data reasoning); bills are checked overdue before a payment request and paid (a bill record, or the
payment's own confirmation) before a suspension is lifted, which a contract ended forbids (a
condition left unchecked as well, unless the agent said it had ended:
labels/telecom_resume_amendment.md); refuels are at most 2 GB and their price is confirmed first.
What the status outputs show (`telecom_state`) must be read right: a setting the agent calls fine
while the last status read shows the guide's fault is a data-reasoning finding (a line over its
data limit never refuelled is no misreading: labels/data_reasoning_amendment.md; a refuel the gold
makes is then a step left undone, by the gold's gap); the steps the agent left undone after such a
misreading are owed to it (`Finding.misled`), not counted again, while the transfer it made
believing the guide exhausted still came too early (`checks.transfers`). Each rule names the
policy sentence it implements.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tracegym.analysis.rules import procedures
from tracegym.analysis.rules.conversation import Call, Conversation, assertions, mentions, negated, sentences
from tracegym.analysis.rules.domain import ActionRule, ConversationRule, Domain, Finding
from tracegym.analysis.rules.telecom_state import faults, statements

PHONE = re.compile(r"\b\d{3}-\d{3}-\d{4}\b")
LINE_WRITES = frozenset({"suspend_line", "resume_line", "enable_roaming", "disable_roaming", "refuel_data"})
WRITES = LINE_WRITES | {"send_payment_request"}
REFUEL_LIMIT_GB = 2
PRICE_WORDS = ("$", "price", "cost", "costs", "charge", "charged", "fee", "per gb", "/gb")
_RIGHT_LINE = "Apply the refueled data to the line associated with the phone number the user provided."
_IS = r"(?: is| was| has been| are| were)(?: now| still| already)?"
_ROAMING_ON = rf"\broaming{_IS} (?:enabled|on|active|turned on)\b"
DENIALS = {  # fault (telecom_state) -> an agent's statement that it is absent
    "data roaming off": re.compile(_ROAMING_ON, re.IGNORECASE),
    "line roaming not enabled": re.compile(_ROAMING_ON, re.IGNORECASE),
    "airplane mode on": re.compile(rf"\bairplane mode{_IS} (?:off|disabled|turned off)\b", re.IGNORECASE),
    "mobile data off": re.compile(
        rf"\bmobile data{_IS} (?:enabled|on|turned on)\b|\bmobile data enabled\b", re.IGNORECASE
    ),
    "Wi-Fi Calling on": re.compile(
        rf"\bwi-?fi calling{_IS} (?:off|disabled|turned off)\b|\bwi-?fi calling off\b", re.IGNORECASE
    ),
    "MMSC URL not set": re.compile(
        rf"\b(?:correct|right|proper) APN\b|\bAPN(?: settings)?{_IS} (?:correct|fine|ok)\b", re.IGNORECASE
    ),
    "messaging permissions missing": re.compile(
        r"\b(?:right|correct|necessary|required|proper)(?: app)? permissions\b|"
        rf"\bpermissions{_IS} (?:correct|granted|fine|"
        r"in place)\b|\ball (?:\w+ )?permissions\b",
        re.IGNORECASE,
    ),
    "data limit exceeded": re.compile(
        r"\bha(?:s|ve) (?:\w+ ){0,2}data (?:available|left|remaining)\b|"
        r"\bwithin (?:the |your )?(?:data )?(?:limit|allowance)\b",
        re.IGNORECASE,
    ),
}
_NOT_A_CLAIM = re.compile(
    r"\b(?:make sure|ensure|check|verify|please|once|when|after|until|will|would|let me know|"
    r"to (?:turn|toggle|switch|enable|disable|grant)|indicat\w*)\b|^\W*(?:\d+\.\s*)?\W*"
    r"(?:turn|toggle|switch|enable|disable|go|tap|open|set|reset|reboot|restart|grant|try|run)\b",
    re.IGNORECASE,
)


def user_numbers(conversation: Conversation, before: int | None = None) -> set[str]:
    """The phone numbers the user gave before message `before` (default: all); in a run with no user
    (a solo run, whose ticket names the number), those the agent looked the customer up by."""
    if conversation.texts("user"):
        return set(PHONE.findall(conversation.user_text(before)))
    return {
        str(c.arguments.get("phone_number"))
        for c in conversation.agent_calls
        if c.name == "get_customer_by_phone" and (before is None or c.index < before)
    }


def user_lines(conversation: Conversation) -> set[str]:
    """The lines the task is about: those with a number the user gave (`user_numbers`) and those the
    gold actions act on."""
    numbers = user_numbers(conversation)
    return {line for line, number in line_numbers(conversation).items() if number in numbers} | {
        str(a["arguments"]["line_id"]) for a in conversation.gold if a["arguments"].get("line_id")
    }


def line_numbers(conversation: Conversation) -> dict[str, str]:
    """{line id: phone number} from every line record the tools showed."""
    return {
        str(obj["line_id"]): str(obj["phone_number"])
        for _, obj in conversation.records("phone_number")
        if "line_id" in obj
    }


def _right_line(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    """A write to a line the agent had read whose number is not the user's: a write on the wrong
    record (tool-calling precision) chosen by misreading which line is the user's (data reasoning),
    as everywhere (`checks`; labels/round5_brief.md)."""
    numbers, wanted = line_numbers(conversation), user_numbers(conversation, before)
    number = numbers.get(str(arguments.get("line_id")))
    if wanted and number and number not in wanted:
        text = f"{name} on line {arguments.get('line_id')} ({number}); the user's number is {', '.join(sorted(wanted))}"
        yield Finding("structured_data_reasoning", before, text)
        yield Finding("tool_calling_precision", before, text)


def _refuel_limit(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    amount = arguments.get("gb_amount")
    if isinstance(amount, (int, float)) and amount > REFUEL_LIMIT_GB:
        yield Finding("policy_compliance", before, f"refuel_data of {amount} GB; at most {REFUEL_LIMIT_GB} GB")


_PAID = re.compile(r"Payment of [\d.]+ \w+ has been made for bill (\w+)", re.IGNORECASE)


def _bills(conversation: Conversation, before: int) -> list[tuple[int, dict]]:
    """(result index, record) of every bill record with a status read before message `before`."""
    return [(at, obj) for at, obj in conversation.records("bill_id", before) if "status" in obj]


def bill_statuses(conversation: Conversation, before: int) -> dict[str, str]:
    """{bill id: its status as last shown before message `before`}, lower-cased: from the bill
    records read, and "paid" from a payment's own confirmation ("Payment of 65.0 USD has been made
    for bill B1234321"), whichever came later."""
    shown = [(at, str(obj["bill_id"]), str(obj.get("status")).lower()) for at, obj in _bills(conversation, before)]
    shown += [
        (call.result_index, paid.group(1), "paid")
        for call in conversation.calls
        if call.result_index is not None
        and call.result_index < before
        and isinstance(call.output, str)
        and not call.error
        for paid in _PAID.finditer(call.output)
    ]
    return {bill: status for _, bill, status in sorted(shown, key=lambda event: event[0])}


def _overdue_checked(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    bill = [b for _, b in _bills(conversation, before) if str(b.get("bill_id")) == str(arguments.get("bill_id"))]
    if not bill or str(bill[-1].get("status")).lower() != "overdue":
        shown = bill[-1].get("status") if bill else "never read"
        yield Finding(
            "precondition_verification",
            before,
            f"send_payment_request({arguments.get('bill_id')}) without the bill shown overdue (status: {shown})",
        )


def _resume_allowed(conversation: Conversation, name: str, arguments: dict, before: int) -> Iterator[Finding]:
    line = conversation.record("line_id", arguments.get("line_id"), before, with_key="contract_end_date")
    today = conversation.now
    if line and today and str(line.get("contract_end_date")) < today.date().isoformat():
        text = f"resume_line({arguments.get('line_id')}): contract ended {line.get('contract_end_date')}"
        yield Finding("policy_compliance", before, text)
        if not _contract_end_noted(conversation, line.get("contract_end_date"), before):
            yield Finding("precondition_verification", before, text)
    unpaid = [
        bill
        for bill, status in bill_statuses(conversation, before).items()
        if status in ("overdue", "awaiting payment")
    ]
    if unpaid:
        yield Finding(
            "precondition_verification",
            before,
            f"resume_line({arguments.get('line_id')}) while bill {unpaid[-1]} was last shown unpaid",
        )


_CONTRACT_ENDED = re.compile(
    r"\bcontract\b[^.?!\n]{0,80}\b(?:ended|expired|is over|in the past|has passed|lapsed)\b", re.IGNORECASE
)


def _contract_end_noted(conversation: Conversation, end_date: Any, before: int) -> bool:
    """Whether the agent said, before message `before`, that the contract had ended or named its end
    date: a suspension then lifted is a breach it knew of (policy compliance alone), not a
    condition left unchecked (labels/telecom_resume_amendment.md)."""
    return any(
        mentions(text, end_date) or _CONTRACT_ENDED.search(text)
        for _, text in conversation.texts("assistant", 0, before)
    )


def _wrong_line_read(conversation: Conversation) -> Iterator[Finding]:
    """Telling the user about lines none of which has the number the user gave: the first message
    after such reads that names a value from them (the line's status, usage, plan), or, where the
    user's own line is never read though the gold acts on a line, the first message after them (the
    wrong line stood for the user's throughout). A message that states nothing read is no misreading
    where the user's line is read later or the task never needed it."""
    numbers = line_numbers(conversation)
    reads = [
        (c.index, numbers[str(c.arguments.get("line_id") or c.arguments.get("id"))], c.output)
        for c in conversation.agent_calls
        if str(c.arguments.get("line_id") or c.arguments.get("id")) in numbers and not c.error
    ]
    wanted_ever = user_numbers(conversation)
    right_line_read = any(number in wanted_ever for _, number, _ in reads)
    line_needed = any(a["arguments"].get("line_id") for a in conversation.gold)
    for index, text in conversation.texts("assistant"):
        read = {number for at, number, _ in reads if at < index}
        wanted = user_numbers(conversation, index)
        if read and wanted:
            if wanted & read:
                return
            shown = [
                value for at, _, output in reads if at < index for value in _stated_values(conversation, output, index)
            ]
            if (line_needed and not right_line_read) or any(value.search(text) for value in shown):
                yield Finding(
                    "structured_data_reasoning",
                    index,
                    f"read line(s) {', '.join(sorted(read))}, not the "
                    f"user's {', '.join(sorted(wanted))}, then says: {text}",
                )
                return


def _stated_values(conversation: Conversation, line: Any, before: int) -> list[re.Pattern]:
    """What a line record read tells, as patterns to find in a message: its status, its usage and its
    plan's limit in GB ("3.2GB", "5 GB"; a bare 5 is no claim, "5G" a network), and its plan's name
    (the plan as read before message `before`); no ids or dates."""
    if not isinstance(line, dict):
        return []
    plan = conversation.record("plan_id", line.get("plan_id"), before, with_key="name") or {}
    words = [str(value) for value in (line.get("status"), plan.get("name")) if isinstance(value, str) and value.strip()]
    sizes = [
        value
        for value in (line.get("data_used_gb"), plan.get("data_limit_gb"))
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    ]
    return [re.compile(rf"\b{re.escape(word)}\b", re.IGNORECASE) for word in words] + [
        re.compile(rf"(?<![\d.]){re.escape(f'{size:g}')}\s?GB\b", re.IGNORECASE) for size in sizes
    ]


def _denied_faults(conversation: Conversation) -> Iterator[Finding]:
    """Telling the user (or the human agent taking over) that a setting is fine while the last
    status output read shows the fault the troubleshooting guide names (instructions and questions
    are not claims)."""
    lines = user_lines(conversation)
    for index, text in statements(conversation):
        claims = assertions(text, _NOT_A_CLAIM)
        present = faults(conversation, index, lines) if claims else {}
        for fault, shown in present.items():
            claim = next((s for s in claims if DENIALS[fault].search(s)), None)
            if claim:
                yield Finding(
                    "structured_data_reasoning",
                    index,
                    f"says {claim!r}, but the last status read shows {fault} ({shown})",
                    misled=True,
                )
                return


_LOCKED_SIM = "escalate to technical support for assistance with SIM security"
_CODE = re.compile(r"\b(?:PIN|PUK)\b", re.IGNORECASE)
_ENTER = re.compile(r"\benter", re.IGNORECASE)


def _sim_code_procedure(conversation: Conversation) -> Iterator[Finding]:
    """Once a SIM status read showed the SIM locked, telling the user to enter a PIN or PUK: the
    guide escalates a locked SIM to technical support and gives no unlocking procedure."""
    locked = [
        c.result_index
        for c in conversation.calls
        if c.name == "check_sim_status" and c.result_index is not None and "locked" in str(c.output).lower()
    ]
    if not locked:
        return
    for index, text in conversation.texts("assistant", min(locked)):
        sentence = next((s for s in sentences(text) if _CODE.search(s) and _ENTER.search(s) and not negated(s)), None)
        if sentence:
            yield Finding(
                "policy_compliance",
                index,
                f"a locked SIM is escalated, yet the agent has the user enter a code: {sentence!r}",
            )
            return


def confirmation(call: Call, conversation: Conversation) -> list[tuple[Any, ...]] | None:
    if call.name == "refuel_data":
        return [(call.arguments.get("gb_amount"),), PRICE_WORDS]
    return None


DOMAIN = Domain(
    name="telecom",
    writes=WRITES,
    reads=frozenset(
        {
            "get_customer_by_id",
            "get_customer_by_name",
            "get_customer_by_phone",
            "get_details_by_id",
            "get_bills_for_customer",
            "get_data_usage",
        }
    ),  # τ²-bench's READ tools of the agent (the user's own tools are the device's)
    record_keys=("customer_id", "line_id"),
    confirmation=confirmation,
    confirmation_policy="Confirm the price",
    action_rules=(
        ActionRule(_RIGHT_LINE, LINE_WRITES, _right_line),
        ActionRule(
            "The maximum amount of data that can be refueled is 2GB.", frozenset({"refuel_data"}), _refuel_limit
        ),
        ActionRule(
            "You should always check that the bill is overdue before sending a payment request.",
            frozenset({"send_payment_request"}),
            _overdue_checked,
        ),
        ActionRule(
            "You are allowed to lift the suspension after the user has paid all their overdue bills.",
            frozenset({"resume_line"}),
            _resume_allowed,
        ),
    ),
    conversation_rules=(
        ConversationRule(_RIGHT_LINE, _wrong_line_read),
        ConversationRule(
            "Shows airplane mode status, signal strength, network type, whether mobile data is enabled, and whether "
            "data roaming is enabled.",
            _denied_faults,
        ),
        ConversationRule(_LOCKED_SIM, _sim_code_procedure),
        procedures.RULE,
    ),
    preconditions_always=True,
    workflow=True,
)
