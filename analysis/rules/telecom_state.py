"""What the telecom tool outputs say about the faults the policy's troubleshooting guide names.

Each fault is read from the outputs that show it (the phone's status checks and toggles, the
messaging app's permissions, the line and plan records) in message order, so the state at any
message is the last one shown before it. The guide's own wording decides what counts as faulty:
data roaming off on the phone or not enabled on the line (for a user abroad), airplane mode on,
mobile data off, Wi-Fi Calling on (it conflicts with MMS), no MMSC URL in the APN settings, the
messaging app without its "sms" or "storage" permission, and a line whose data usage exceeds its
plan's limit plus what was refuelled.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tracegym.analysis.rules.conversation import Conversation

MESSAGING_NEEDS = frozenset({"sms", "storage"})  # "the messaging app needs ... storage ... and sms"
_SWITCHES = {  # fault -> (state shown in an output, the values meaning the fault is present)
    "data roaming off": (
        re.compile(r"Data Roaming(?: Enabled:| is now) (Yes|No|ON|OFF)\b", re.IGNORECASE),
        {"no", "off"},
    ),
    "airplane mode on": (re.compile(r"Airplane Mode(?::| is now) (ON|OFF)\b", re.IGNORECASE), {"on"}),
    "mobile data off": (
        re.compile(r"Mobile Data(?: Enabled:| is now) (Yes|No|ON|OFF)\b", re.IGNORECASE),
        {"no", "off"},
    ),
    "Wi-Fi Calling on": (re.compile(r"Wi-Fi Calling is (?:currently turned |now )?(ON|OFF)\b", re.IGNORECASE), {"on"}),
    "MMSC URL not set": (re.compile(r"MMSC URL \(for picture messages\): (Not Set|\S+)", re.IGNORECASE), {"not set"}),
}
_LISTED = re.compile(r"App 'messaging' has permission for: ([^\n]*)", re.IGNORECASE)
_STATUS = re.compile(r"Status for App: messaging.*?Permissions Granted:((?:\s*-\s*\w+)*)", re.IGNORECASE | re.DOTALL)
_GRANTED = re.compile(r"Permission '(\w+)' granted to app 'messaging'", re.IGNORECASE)


def _permissions(text: str, held: set[str] | None) -> set[str] | None:
    """The messaging app's permissions after an output: a listing replaces them, a grant adds one."""
    if listed := _LISTED.search(text):
        return set(re.findall(r"\w+", listed.group(1).lower()))
    if status := _STATUS.search(text):
        return set(re.findall(r"-\s*(\w+)", status.group(1).lower()))
    if granted := _GRANTED.search(text):
        return (held or set()) | {granted.group(1).lower()}
    return held


def exceeded_lines(conversation: Conversation, before: int | None = None) -> dict[str, str]:
    """{line id: "used U GB of L GB (+R refuelled)"} for every line whose record, read before
    `before`, shows data usage above its plan's limit (the plan's record read too) plus refuels."""
    limits = {
        str(obj["plan_id"]): obj["data_limit_gb"]
        for _, obj in conversation.records("data_limit_gb", before)
        if "plan_id" in obj and isinstance(obj.get("data_limit_gb"), (int, float))
    }
    lines = {str(obj["line_id"]): obj for _, obj in conversation.records("data_used_gb", before) if "line_id" in obj}
    found = {}
    for line_id, line in lines.items():
        used, refuelled, limit = (
            line.get("data_used_gb"),
            line.get("data_refueling_gb") or 0,
            limits.get(str(line.get("plan_id"))),
        )
        if (
            isinstance(used, (int, float))
            and isinstance(refuelled, (int, float))
            and limit is not None
            and used > limit + refuelled
        ):
            found[line_id] = f"used {used} GB of {limit} GB (+{refuelled} refuelled)"
    return found


def faults(conversation: Conversation, before: int, lines: set[str]) -> dict[str, str]:
    """{fault: what showed it} for the faults present at message `before`, as the outputs read
    before it last showed them; line faults only on `lines` (the user's)."""
    state: dict[str, str | None] = {}
    held: set[str] | None = None
    for call in conversation.calls:
        if call.result_index is None or call.result_index >= before or call.error:
            continue
        text = call.output if isinstance(call.output, str) else ""
        for fault, (pattern, faulty) in _SWITCHES.items():
            for shown in pattern.finditer(text):
                state[fault] = shown.group(0) if shown.group(1).lower() in faulty else None
        held = _permissions(text, held)
        if call.name == "enable_roaming" and str(call.arguments.get("line_id")) in lines:
            state["line roaming not enabled"] = None
        if (
            isinstance(call.output, dict)
            and str(call.output.get("line_id")) in lines
            and "roaming_enabled" in call.output
        ):
            state["line roaming not enabled"] = (
                None if call.output["roaming_enabled"] else f"line {call.output['line_id']}: roaming_enabled false"
            )
    if held is not None and not MESSAGING_NEEDS <= held:
        state["messaging permissions missing"] = f"messaging app permissions: {', '.join(sorted(held)) or 'none'}"
    for line_id, usage in exceeded_lines(conversation, before).items():
        if line_id in lines:
            state["data limit exceeded"] = f"line {line_id} {usage}"
    return {fault: shown for fault, shown in state.items() if shown}


def statements(conversation: Conversation) -> Iterator[tuple[int, str]]:
    """(index, text) of what the agent told the user or a human agent: its messages and transfer summaries."""
    for index, message in enumerate(conversation.messages):
        if message.role != "assistant":
            continue
        if message.content.strip():
            yield index, message.content
        for call in message.tool_calls:
            summary: Any = call.arguments.get("summary") if call.name == "transfer_to_human_agents" else None
            if isinstance(summary, str) and summary.strip():
                yield index, summary
