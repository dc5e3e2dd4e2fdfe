"""The checks every τ-style domain shares, parameterised by its `Domain`, and the gold comparison.

Gold actions are evidence, not truth: each missed gold action is first checked against the policy
and against the benchmark's own corrections (`corrections`: a gold action the policy forbids, or one
the benchmark later corrected, blames the benchmark, not the agent), then paired with the
agent's call of the same tool on the same record (never merely the first call of that name), and
told apart as: a value the user dictated (the agent followed the user), a wrong value read from
the data (structured data reasoning; a record chosen that way is also a write on the wrong record,
tool-calling precision, labels/round5_brief.md), a wrong or invented argument (tool-calling
precision), a request the agent refused although the policy allows it (policy compliance), or a
step never carried out (multi-step completion). A missed gold look-up is not a missed step; a
missed gold transfer is one only in a workflow domain, whose procedure ends in it (no policy
finding: elsewhere a refusal in its place complies).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tracegym.analysis.detectors import canonical, render
from tracegym.analysis.rules import corrections
from tracegym.analysis.rules.conversation import (
    STOP_TOKENS,
    Call,
    Conversation,
    awaits_answer,
    is_affirmative,
    mentions,
)
from tracegym.analysis.rules.domain import TRANSFER, Domain, Finding
from tracegym.analysis.rules.payments import describe_payment

LOOPING_TERMINATIONS = {"max_steps", "too_many_errors", "timeout", "context_window_exceeded"}
_REFUSAL = re.compile(
    r"\b(?:polic(?:y|ies)|not (?:allowed|permitted|eligible)|isn['’]?t (?:allowed|permitted|eligible)|"
    r"against (?:the|our) rules|(?:cannot|can['’]?t|could not|couldn['’]?t) be (?:modified|changed|cancell?ed|"
    r"refunded|returned|exchanged)|(?:unable|not able) to (?:modify|change|cancel|refund|return|exchange))\b",
    re.IGNORECASE,
)
_REFUSED_CHANGE = re.compile(
    r"\b(?:not (?:allowed|permitted|eligible)|isn['’]?t (?:allowed|permitted|eligible)|(?:cannot|can['’]?t|could "
    r"not|couldn['’]?t) be (?:modified|changed|cancell?ed|refunded|returned|exchanged)|(?:unable to|not able "
    r"to|cannot|can['’]?t) (?:process )?(?:(?:this|the|your|that) )?(?:modif|chang|cancel|refund|return|exchang)\w*|"
    r"does(?: not|n['’]?t) (?:meet|qualify|satisfy))\b",
    re.IGNORECASE,
)  # a refusal, not a mere mention of policy
_ARGUMENT_ERROR = re.compile(
    r"not found|invalid|does not exist|no such|unknown|format|missing|required|"
    r"does not add up|should (?:be different|match)",
    re.IGNORECASE,
)  # what the call itself got wrong
_MISCOMPUTED = re.compile(r"does not add up|total (?:price|amount) is \$?[\d.,]+,? but (?:paid|got)", re.IGNORECASE)
_DEFERRED = re.compile(
    r"\b(?:prefer to wait|hold off|(?:reach out|contact you|call back|come back)(?: again)? (?:later|once|when)|"
    r"decide later|think (?:about it|it over)|never ?mind|changed my mind)\b",
    re.IGNORECASE,
)
_SENDS_AWAY = re.compile(
    r"\b(?:contact|call) us (?:again|back|later)\b|\b(?:reach out|come back)(?: to us)? (?:again|later)\b",
    re.IGNORECASE,
)  # the agent putting the step off to another call
_CANNOT = re.compile(
    r"\b(?:can only|cannot|can['’]?t|unable|not (?:possible|able|allowed|permitted|eligible))\b", re.IGNORECASE
)
_URL = re.compile(r"(?:https?|ftp)://", re.IGNORECASE)
_TEXT_CALL = re.compile(r'"name"\s*:\s*"\w+"\s*,\s*"arguments"\s*:')  # {"name": "get_user_details", "arguments": ...
GOLD_RULES = {"policy_compliance", "structured_data_reasoning"}  # findings that make a gold action break the policy
GOLD_AT_FAULT = ("breaks_policy", "corrected_gold")


def _leaves(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """(argument name, scalar) pairs inside an argument value; list items keep their list's name."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _leaves(item, name)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item, key)
    elif value is not None:
        yield key, value


@dataclass(frozen=True)
class Gap:
    """A missed gold action and what the run shows about it: `kind` is one of "breaks_policy",
    "corrected_gold", "superseded" (corrected by the benchmark into an action the agent did not make
    either), "no_effect" (the system refused the same write for its record's state), "followed_user",
    "attempted" (the same call was made), "deferred" (the user put it off), "data", "argument",
    "refused", "transfer", "not_done"; `finding` the capability finding it gives the agent, or for
    the two GOLD_AT_FAULT kinds what is wrong with the gold; `also` a second finding of the same
    gap (the wrong record of a "data" gap)."""

    action: dict[str, Any]
    kind: str
    finding: Finding | None
    also: Finding | None = None

    @property
    def blames_agent(self) -> bool:
        return self.finding is not None and self.kind not in GOLD_AT_FAULT


def _gold(conversation: Conversation) -> list[tuple[dict[str, Any], bool]]:
    """Each gold action and whether the run matched it: τ²'s action_checks when recorded, else ours."""
    if conversation.action_checks:
        return conversation.action_checks
    return [
        (
            a,
            (a.get("requestor") or "assistant") != "assistant"
            or any(c.name == a["name"] and _differing(a, c.arguments) == [] for c in conversation.agent_calls),
        )
        for a in conversation.gold
    ]


def _key(value: Any) -> str:
    """A comparison key for an argument: a list of ids or other scalars is a set (its order carries no meaning)."""
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        return canonical(sorted(map(canonical, value)))
    return canonical(value)


def _as_expected(value: Any, expected: Any) -> Any:
    """`value` cut to the fields `expected` has: in a dict, or in each dict of a list of dicts (a
    flight given with its origin and price is the flight the gold names; the tool reads only its
    own fields)."""
    if isinstance(value, dict) and isinstance(expected, dict):
        return {k: _as_expected(value.get(k), expected[k]) for k in expected if k in value}
    if (
        isinstance(value, list)
        and isinstance(expected, list)
        and expected
        and all(isinstance(e, dict) for e in expected)
    ):
        fields = {k for e in expected for k in e}
        return [{k: v for k, v in item.items() if k in fields} if isinstance(item, dict) else item for item in value]
    return value


def _differing(action: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    """The compared arguments of a gold action that `arguments` gives otherwise (fields the gold's
    values lack are ignored, `_as_expected`)."""
    expected = action.get("arguments") or {}
    keys = action.get("compare_args")
    return [
        k
        for k in (list(expected) if keys is None else keys)
        if _key(_as_expected(arguments.get(k), expected.get(k))) != _key(expected.get(k))
    ]


def record_of(domain: Domain, arguments: dict[str, Any]) -> tuple:
    """The record a write changes: its record-key arguments (every `*_id` but payment ones, for a
    domain that declares none)."""
    keys = domain.record_keys or tuple(k for k in arguments if k.endswith("_id") and "payment" not in k)
    return tuple((k, canonical(arguments.get(k))) for k in keys if k in arguments)


def _words(conversation: Conversation, domain: Domain, value: Any) -> set[str]:
    """A value's scalars and the words that describe them (a retail item's name and option values,
    a payment method's brand and last four digits)."""
    scalars = [v for _, v in _leaves(value)]
    return {
        str(w)
        for w in scalars
        + [w for v in scalars for w in domain.expand(conversation, v)]
        + [w for v in scalars for w in describe_payment(conversation, v)]
    }


def _user_chose(conversation: Conversation, domain: Domain, chosen: Any, gold: Any, before: int) -> bool:
    """Whether what tells `chosen` apart from `gold` is what the user said first (not an echo of the
    agent's offer), and nothing telling gold apart was said by the user."""
    mine, theirs = _words(conversation, domain, chosen), _words(conversation, domain, gold)
    return any(conversation.user_named_first(w, before) for w in mine - theirs) and not any(
        conversation.said_by_user(w, before) for w in theirs - mine
    )


def _grounded(conversation: Conversation, value: Any, before: int) -> bool:
    return all(conversation.seen_in_outputs(v, before) for _, v in _leaves(value))


def _argument_gap(conversation: Conversation, domain: Domain, action: dict, call: Call) -> Gap:
    expected = action.get("arguments") or {}
    wrong = _differing(action, call.arguments)
    shown = ", ".join(f"{k}={call.arguments.get(k)!r} (gold {expected.get(k)!r})" for k in wrong)
    text = f"{call.name}: {shown}; call {render(call.name, call.arguments)}"
    if not wrong:  # the same call was made (and failed, or was graded on keys we do not see): nothing to blame here
        return Gap(action, "attempted", None)
    followed = [
        k for k in wrong if _user_chose(conversation, domain, call.arguments.get(k), expected.get(k), call.index)
    ]
    if len(followed) == len(wrong):
        return Gap(action, "followed_user", None)
    rest = [k for k in wrong if k not in followed]
    partial = [
        k
        for k in rest
        if isinstance(call.arguments.get(k), list)
        and isinstance(expected.get(k), list)
        and set(map(canonical, call.arguments[k])) < set(map(canonical, expected[k]))
    ]
    if partial and len(partial) == len(rest):
        return Gap(
            action,
            "not_done",
            Finding("multi_step_task_completion", call.index, "part of the request left out: " + text),
        )
    misread = [
        k
        for k in rest
        if "payment" not in k
        and _grounded(conversation, call.arguments.get(k), call.index)
        and (k in domain.derived or k.endswith(("_id", "_ids")))
    ]
    if misread and len(misread) == len(rest):
        misread_record = all(k not in domain.derived for k in misread)  # ids only: the write went to another record
        return Gap(
            action,
            "data",
            Finding("structured_data_reasoning", call.index, "wrong value read from the data: " + text),
            Finding("tool_calling_precision", call.index, "write on another record: " + text)
            if misread_record
            else None,
        )
    return Gap(action, "argument", Finding("tool_calling_precision", call.index, "wrong argument: " + text))


def _refused(conversation: Conversation, domain: Domain, action: dict[str, Any]) -> int | None:
    """The agent message refusing the action on the policy's grounds and naming the record it changes."""
    values = [(action.get("arguments") or {}).get(k) for k, _ in record_of(domain, action.get("arguments") or {})]
    if not values:
        return None
    for index, text in conversation.texts("assistant"):
        if _REFUSAL.search(text) and any(mentions(text, v) for v in values):
            return index
    return None


def refused_records(conversation: Conversation, domain: Domain) -> set[str]:
    """The records (canonical ids under the domain's record keys but the user's) an agent message
    refuses to change ("cannot be cancelled", "not eligible"), naming them."""
    ids = {
        obj.get(key)
        for key in domain.record_keys
        if key != "user_id"
        for _, obj in conversation.records(key)
        if isinstance(obj.get(key), str)
    }
    return {
        canonical(record)
        for _, text in conversation.texts("assistant")
        if _REFUSED_CHANGE.search(text)
        for record in ids
        if mentions(text, record)
    }


def _deferred_by_user(conversation: Conversation, action: dict[str, Any]) -> bool:
    """Whether the user put the action off ("I'd prefer to wait", "I'll call back later") after the
    agent had proposed it (named one of its ids: a flight number, a record or item id), and not in
    answer to an agent message that refused it or sent the user away to call again."""
    details = [
        v
        for _, v in _leaves(action.get("arguments") or {})
        if isinstance(v, str) and re.search(r"\d", v) and len(v) >= 3
    ]
    proposed = next((i for i, text in conversation.texts("assistant") if any(mentions(text, v) for v in details)), None)
    if proposed is None:
        return False
    for index, text in conversation.texts("user", proposed):
        said = conversation.texts("assistant", proposed, index)
        if _DEFERRED.search(text) and not (said and (_CANNOT.search(said[-1][1]) or _SENDS_AWAY.search(said[-1][1]))):
            return True  # giving up after a refusal, or agreeing to come back when the agent asked, is no choice
    return False


def _state_error(call: Call) -> bool:
    """A failed call the system refused for the state of its record (an order not delivered), not for a bad argument."""
    return call.error and not _ARGUMENT_ERROR.search(str(call.output))


def _refused_by_state(conversation: Conversation, domain: Domain, action: dict[str, Any]) -> bool:
    """Whether the system refused the agent's call of this gold write's tool on its record for the
    record's state: the gold write could not have changed the database either."""
    record = record_of(domain, action.get("arguments") or {})
    return any(
        c.name == action.get("name") and record_of(domain, c.arguments) == record and _state_error(c)
        for c in conversation.agent_calls
    )


def _excused_by_correction(conversation: Conversation, domain: Domain, action: dict[str, Any]) -> bool:
    """Whether missing this stale gold action (one the benchmark later corrected) is the benchmark's
    error: the corrected task set would not fail the agent on it either (it dropped the action, or
    the agent made the action it put instead)."""
    task, name = conversation.trajectory.task_id, action.get("name", "")
    return not corrections.replaced(domain.name, task, name) or any(
        corrections.corrected_expects(domain.name, task, c.name, c.arguments)
        for c in conversation.agent_calls
        if c.name == name
    )


def gold_violations(
    conversation: Conversation, domain: Domain, action: dict[str, Any], gold: list[dict[str, Any]]
) -> list[Finding]:
    """How a gold action breaks the policy (or contradicts the data), given everything the run read
    and the gold actions listed before it in `gold` taken as done."""
    prior = gold[: next((i for i, a in enumerate(gold) if a is action), len(gold))]
    found = domain.check_action(
        conversation.after(prior), action.get("name", ""), action.get("arguments") or {}, len(conversation.messages)
    )
    return [Finding(f.capability, None, f.text, transfers=f.transfers) for f in found if f.capability in GOLD_RULES]


def _missed_transfer(conversation: Conversation, domain: Domain, required: str) -> Finding | None:
    """What a gold transfer the agent never made shows: a step of the procedure left out in a
    workflow domain; a request kept that the domain's own transfer rule sends to a human (policy
    compliance); elsewhere nothing (a refusal in its place complies)."""
    if domain.workflow:
        return Finding("multi_step_task_completion", None, required)
    if domain.transfer_called_for(conversation, len(conversation.messages)):
        return Finding("policy_compliance", None, f"{required} ({domain.transfer_policy})")
    return None


def gold_gaps(conversation: Conversation, domain: Domain) -> list[Gap]:
    """What each missed gold write, transfer or user-side step shows (see the module docstring)."""
    gold = _gold(conversation)
    missed = [
        a
        for a, ok in gold
        if not ok
        and (
            domain.is_write(a.get("name", ""))
            or a.get("name") == TRANSFER
            or (a.get("requestor") or "assistant") != "assistant"
        )
    ]
    writes = [c for c in conversation.agent_calls if domain.is_write(c.name) and not c.error]
    claimed = {
        id(c)
        for a, ok in gold
        if ok
        for c in writes
        if c.name == a.get("name") and record_of(domain, c.arguments) == record_of(domain, a.get("arguments") or {})
    }
    gaps = []
    for action in missed:
        name, arguments = action.get("name", ""), action.get("arguments") or {}
        if (action.get("requestor") or "assistant") != "assistant":
            gaps.append(
                Gap(
                    action,
                    "not_done",
                    Finding(
                        "multi_step_task_completion",
                        None,
                        f"step the user had to take was never reached: {render(name, arguments)}",
                    ),
                )
            )
            continue
        if _refused_by_state(conversation, domain, action):
            gaps.append(Gap(action, "no_effect", None))
            continue
        if broken := gold_violations(conversation, domain, action, [a for a, _ in gold]):
            gaps.append(Gap(action, "breaks_policy", broken[0]))
            continue
        if corrections.stale(domain.name, conversation.trajectory.task_id, action):
            if _excused_by_correction(conversation, domain, action):
                gaps.append(
                    Gap(
                        action,
                        "corrected_gold",
                        Finding(
                            "policy_compliance",
                            None,
                            f"the benchmark corrected this gold action in a later task set ({corrections.SOURCE})",
                        ),
                    )
                )
            else:  # the corrected set would fail the agent too, on an action this stale one cannot describe
                gaps.append(Gap(action, "superseded", None))
            continue
        if name == TRANSFER:
            if not any(c.name == TRANSFER for c in conversation.agent_calls):
                required = "the policy required a transfer to a human agent; none was made"
                gaps.append(Gap(action, "transfer", _missed_transfer(conversation, domain, required)))
            continue
        same = [
            c
            for c in conversation.agent_calls
            if c.name == name and record_of(domain, c.arguments) == record_of(domain, arguments)
        ]
        other = [c for c in writes if c.name == name and id(c) not in claimed]
        if same or other:
            call = ([c for c in same if not c.error] or same or other)[-1]
            claimed.add(id(call))
            gaps.append(_argument_gap(conversation, domain, action, call))
        elif _deferred_by_user(conversation, action):
            gaps.append(Gap(action, "deferred", None))
        elif (refusal := _refused(conversation, domain, action)) is not None:
            gaps.append(
                Gap(
                    action,
                    "refused",
                    Finding(
                        "policy_compliance",
                        refusal,
                        f"refused what the policy allows "
                        f"({render(name, arguments)}): {conversation.messages[refusal].content}",
                    ),
                )
            )
        else:
            gaps.append(
                Gap(
                    action,
                    "not_done",
                    Finding(
                        "multi_step_task_completion",
                        None,
                        f"requested step never carried out: {render(name, arguments)}",
                        True,
                    ),
                )
            )
    return gaps


def user_left_early(conversation: Conversation) -> Finding | None:
    """The user simulator's stop token ended the run before the agent could act: as its first
    words, or (with a yes, or alone) right after the agent asked a question or for a confirmation
    (a closing "anything else?" asks for nothing)."""
    users = conversation.texts("user")
    if not users or not any(token in users[-1][1] for token in STOP_TOKENS):
        return None
    index, text = users[-1]
    said = text
    for token in STOP_TOKENS:
        said = said.replace(token, "")
    spoken = conversation.texts("assistant", 0, index)
    waiting = bool(spoken) and awaits_answer(spoken[-1][1])
    if len(users) == 1 and not said.strip():
        return Finding("multi_step_task_completion", index, f"the user stopped before stating a request: {text}")
    if waiting and (not said.strip() or is_affirmative(said)):
        return Finding(
            "multi_step_task_completion",
            index,
            f"the user stopped while the agent awaited an answer: {spoken[-1][1][-160:]} / user: {text}",
        )
    return None


def _identifier(key: str) -> bool:
    return key == "id" or key.endswith(("_id", "_ids"))


def _kind(key: str) -> str:
    """The kind of record a key names: reservation_id, reservations -> reservation; flight_number -> flight."""
    return re.sub(r"(?:_ids?|_numbers?|s)$", "", key)


def invented_identifiers(conversation: Conversation, domain: Domain) -> Iterator[Finding]:
    """Arguments that appear nowhere in the conversation before the call: identifiers in writes and
    in look-ups that failed (a guessed id that found its record did no harm), and URLs in any call
    (a configuration address, such as an MMSC, that no output or user gave)."""
    for call in conversation.agent_calls:
        checked = call.error or domain.is_write(call.name)
        for key, value in _leaves(call.arguments):
            identifier = checked and (_identifier(key) or (domain.is_write(call.name) and key == "flight_number"))
            if (
                (identifier or _URL.match(str(value)))
                and str(value).strip()
                and not conversation.seen(value, call.index)
            ):
                yield Finding(
                    "tool_calling_precision",
                    call.index,
                    f"{key}={value!r} appears nowhere before: {render(call.name, call.arguments)}",
                )
                break


def _named_kinds(conversation: Conversation, value: Any, stop: int) -> set[str]:
    """The kinds of id the user called `value` before message `stop` ("my user ID is X" -> user),
    among the kinds of id the tool results hold (a "confirmation number" names none)."""
    pattern = re.compile(
        rf"\b([a-z]+)[ _-]?(?:id|number|code)\b\W{{0,3}}(?:is\W{{0,3}})?{re.escape(str(value))}\b", re.IGNORECASE
    )
    named = {
        match.group(1).lower() for _, text in conversation.texts("user", 0, stop) for match in pattern.finditer(text)
    }
    return {kind for kind in named if conversation.records(f"{kind}_id")}


def misplaced_identifiers(conversation: Conversation) -> Iterator[Finding]:
    """Calls the system rejected for an identifier argument holding an id of another kind, as the
    tool results before it filed that value or the user named it: a user id as a reservation id, a
    reservation code as a flight number. Kinds match by name (new_item_ids holds item ids); a value
    the results hold only at the top level or under a bare "id" has no kind."""
    for call in conversation.agent_calls:
        if not (call.error and _ARGUMENT_ERROR.search(str(call.output))):
            continue
        for key, value in _leaves(call.arguments):
            kinds = (
                {_kind(k) for k in conversation.keys_holding(value, call.index)}
                | (_named_kinds(conversation, value, call.index) if str(value).strip() else set())
            ) - {"", "id"}
            wanted = _kind(key)
            if (
                (_identifier(key) or key == "flight_number")
                and kinds
                and not any(wanted.endswith(kind) or kind.endswith(wanted) for kind in kinds)
            ):
                yield Finding(
                    "tool_calling_precision",
                    call.index,
                    f"{key}={value!r} is a {'/'.join(sorted(kinds))} in the "
                    f"records: {render(call.name, call.arguments)} -> {call.output}",
                )
                break


def calls_written_as_text(conversation: Conversation) -> Iterator[Finding]:
    """An agent message that writes a tool call out as JSON (a "name" and its "arguments") instead
    of making it: the system never runs it (and a call was needed, whatever the task's shape). The
    first such message only."""
    for index, message in enumerate(conversation.messages):
        if message.role == "assistant" and not message.tool_calls and _TEXT_CALL.search(message.content):
            yield Finding(
                "tool_calling_precision",
                index,
                f"a tool call written as text, never made: {message.content.strip()}",
                shows_need=True,
            )
            return


def repeated_cancellations(conversation: Conversation, domain: Domain) -> Iterator[Finding]:
    """A cancellation made again on a record the agent's own cancellation of it already cancelled:
    unlike a repeated update, it is no idempotent retry (each refunds or charges again). The first
    such call only."""
    done: set[tuple] = set()
    for call in conversation.agent_calls:
        if not call.name.startswith("cancel") or not domain.is_write(call.name) or call.error:
            continue
        record = (call.name, record_of(domain, call.arguments))
        if record in done:
            yield Finding(
                "tool_calling_precision",
                call.index,
                f"{call.name} again on a record its own earlier call "
                f"already cancelled: {render(call.name, call.arguments)}",
            )
            return
        done.add(record)


def failed_writes(conversation: Conversation, domain: Domain, gaps: list[Gap]) -> Iterator[Finding]:
    """Writes the system refused. One refused for its own arguments (not found, invalid, missing) is
    imprecision, redone or not (labels/round5_brief.md: "a malformed call the system rejects");
    a payment that did not add up is `miscomputed_payments`'. One refused for its record's state
    (wrong order status, low balance) is a precondition the agent did not verify, when it was never
    redone on the same record and mattered: the run failed, or a gold action of the same tool was
    missed. A write a policy rule already explains is left to it."""
    undone = {g.action.get("name") for g in gaps if g.kind not in GOLD_AT_FAULT}
    mattered = not conversation.trajectory.success
    calls = conversation.agent_calls
    for position, call in enumerate(calls):
        if not (call.error and domain.is_write(call.name)) or _MISCOMPUTED.search(str(call.output)):
            continue
        text = f"{render(call.name, call.arguments)} -> {call.output}"
        if not _state_error(call):
            yield Finding("tool_calling_precision", call.result_index, "write rejected for its arguments: " + text)
        elif (
            (mattered or call.name in undone)
            and not any(
                c.name == call.name
                and not c.error
                and record_of(domain, c.arguments) == record_of(domain, call.arguments)
                for c in calls[position + 1 :]
            )
            and not domain.check_action(conversation, call.name, call.arguments, call.index)
        ):
            yield Finding("precondition_verification", call.result_index, "failed write, never redone: " + text)


def miscomputed_payments(conversation: Conversation, domain: Domain) -> Iterator[Finding]:
    """A write the system refused because its payment did not add up to the total it computed: the
    agent worked the amount out wrong from the prices it read (a misreading, even when a later call
    got it right: the wrong sum was what the agent told the user), and sent a call with mismatched
    amounts. The first such write only."""
    for call in conversation.agent_calls:
        if call.error and domain.is_write(call.name) and _MISCOMPUTED.search(str(call.output)):
            text = f"payment that did not add up: {render(call.name, call.arguments)} -> {call.output}"
            yield Finding("structured_data_reasoning", call.index, text)
            yield Finding("tool_calling_precision", call.index, text)
            return


def unconfirmed_writes(conversation: Conversation, domain: Domain) -> Iterator[Finding]:
    """Writes the policy wants confirmed, made without the user's yes to their details (a run with
    no user to ask, a solo run, needs none)."""
    if (
        not domain.confirmation_policy
        or not domain.applies(conversation, domain.confirmation_policy)
        or not conversation.texts("user")
    ):
        return
    for call in conversation.agent_calls:
        details = domain.confirmation(call, conversation) if domain.is_write(call.name) and not call.error else None
        if details is not None and conversation.confirmed(call.index, details) is None:
            named = "; ".join("/".join(map(str, d[:3])) for d in details)
            yield Finding(
                "precondition_verification",
                call.index,
                f"write without an explicit yes to its details ({named}): {render(call.name, call.arguments)}",
            )


def unread_records(conversation: Conversation, domain: Domain) -> Iterator[Finding]:
    """Writes to a record (reservation, order, line) that no tool result had shown."""
    for call in conversation.agent_calls:
        if not domain.is_write(call.name):
            continue
        for key in domain.record_keys:
            if key in call.arguments and conversation.record(key, call.arguments[key], call.index) is None:
                yield Finding(
                    "precondition_verification",
                    call.index,
                    f"write to {key}={call.arguments[key]!r} without "
                    f"reading it first: {render(call.name, call.arguments)}",
                )
                break


def policy_writes(conversation: Conversation, domain: Domain) -> Iterator[Finding]:
    """Policy rules over every write the agent attempted. A forbidden write the system refused for
    its record's state granted nothing: it shows a condition left unchecked (precondition
    verification), not an exception granted."""
    for call in conversation.agent_calls:
        if not domain.is_write(call.name):
            continue
        for finding in domain.check_action(conversation, call.name, call.arguments, call.index):
            if _state_error(call) and finding.capability == "policy_compliance":
                finding = Finding("precondition_verification", finding.index, f"refused by the system: {finding.text}")
            yield finding


def breaking_writes(conversation: Conversation, domain: Domain) -> list[Finding]:
    """The policy rules the agent's successful writes break in the ways gold is checked for
    (`GOLD_RULES`: a forbidden write, a value the records contradict)."""
    return [
        f
        for f in policy_writes(conversation, domain)
        if f.capability in GOLD_RULES and any(c.index == f.index and not c.error for c in conversation.agent_calls)
    ]


def writes_gold_refuses(conversation: Conversation, domain: Domain) -> Iterator[Finding]:
    """In a domain whose policy no rule module knows, gold is the only evidence of what the policy
    forbids: a failed run's successful write where the gold makes none (the request was to be
    refused) granted what the policy does not allow. Domains with rules judge writes by them."""
    if (
        domain.action_rules
        or conversation.trajectory.success
        or any(domain.is_write(a["name"]) for a in conversation.gold)
    ):
        return
    for call in conversation.agent_calls:
        if domain.is_write(call.name) and not call.error:
            yield Finding(
                "policy_compliance",
                call.index,
                f"write where the task's gold refuses the request: {render(call.name, call.arguments)}",
            )
            return


def transfers(conversation: Conversation, domain: Domain, gaps: list[Gap]) -> Iterator[Finding]:
    """A transfer the policy does not call for, or one made while allowed work the task needed was
    left undone (`gaps`: every gap, also those a misreading is blamed for). The airline and retail
    policies transfer "if and only if the request cannot be handled within the scope of your
    actions": where the domain's rules are checks (`Domain.action_rules`), a transfer is called for
    only where a gold action breaks a rule that sends the request to a human (a cancellation after a
    flight was flown), not even when the user asks for a human after a refusal the policy required
    (labels/round5_brief.md, labels/transfer_amendment.md) and the gold transfers there (every gold
    transfer in τ²'s airline and retail tasks follows such a refusal), or where the domain's own
    transfer rule calls for one given what was read before (`Domain.transfer_called_for`). Where no
    rules are encoded (the generic domain), a gold transfer is the only evidence the policy calls
    for one. In a
    workflow domain the procedure itself ends in a transfer once its steps are exhausted ("try all
    the relevant resolution steps before transferring"), so there only the work left undone counts."""
    left = [g for g in gaps if g.kind in ("not_done", "refused", "argument", "data")]
    gold_transfers = any(a["name"] == TRANSFER for a in conversation.gold)
    expected = (
        domain.workflow
        or (gold_transfers and not domain.action_rules)
        or any(g.kind == "breaks_policy" and g.finding is not None and g.finding.transfers for g in gaps)
    )
    for call in conversation.agent_calls:
        if call.name != TRANSFER:
            continue
        if not (expected or domain.transfer_called_for(conversation, call.index)):
            yield Finding(
                "policy_compliance",
                call.index,
                f"transfer the policy does not call for: {render(call.name, call.arguments)}",
            )
        elif left and not conversation.trajectory.success:
            yield Finding(
                "policy_compliance",
                call.index,
                f"transfer with work the policy allows left undone "
                f"({render(left[0].action.get('name', ''), left[0].action.get('arguments') or {})})",
            )
        return


def termination(conversation: Conversation) -> Iterator[Finding]:
    """A run cut by a looping termination (max_steps ...): multi-step LACKING, shown whatever the
    task's shape (labels/round5_brief.md: "a loop until max_steps stays LACKING")."""
    reason = conversation.trajectory.termination_reason
    if reason in LOOPING_TERMINATIONS:
        yield Finding("multi_step_task_completion", conversation.last, f"terminated by {reason}", True)
