"""What an airline agent says, checked against the policy and the records it read: offers,
promises and claims the policy does not support are findings even when no write follows.

- policy compliance: compensation offered to a user the policy gives none, or before the user
  asked for any; a cabin change offered for some flights or passengers of a reservation only (or
  priced, even as a condition, or priced when the user asked for one, instead of declined); a
  cabin change refused for basic economy (the policy allows it for every reservation); a
  benefit of travel insurance the policy does not give (it refunds a cancellation for health or
  weather reasons, nothing else); a refund promised for a cancellation the policy forbids; a
  cancellation without a refund offered (the policy has none);
- precondition verification: compensation offered before any reservation was read, or when every
  flight status checked shows no disruption; a reservation described without having been read (a
  state asserted, nothing misread: labels/data_reasoning_amendment.md);
- structured data reasoning: a membership level the profile contradicts, a reservation called
  already flown whose flights are all still ahead, a certificate counted for more or fewer
  passengers than any reservation read has.
Claims are read clause by clause (`conversation.assertions`): questions, conditions and negated
clauses ("this is not eligible for a refund") assert nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tracegym.analysis.rules.airline_records import (
    CERTIFICATE_PER_PASSENGER,
    SAID_FLOWN,
    cancellation_refused,
    flown,
    flown_unnoticed,
    may_compensate,
    reservation,
    reservations,
    undisrupted_statuses,
    unflown_reading,
    user,
)
from tracegym.analysis.rules.conversation import Conversation, assertions, dicts, listed, mentions, negated, sentences
from tracegym.analysis.rules.domain import ConversationRule, Finding
from tracegym.analysis.rules.payments import held_methods

_MEMBER_CLAIM = re.compile(
    r"\b(?:you(?:['’]re| are)|your|as an?)\s+(?:a\s+)?(gold|silver|regular)\s+(?:member|membership|status|tier)",
    re.IGNORECASE,
)
_OFFER = re.compile(
    r"\b(offer|issue|provide|send|give|compensate)\w*\b(?!\s+(?:me|us|your)\b)"  # "provide your ..." asks the user
    r"[^.?!\n]{0,80}\b(certificate|compensation|voucher)",
    re.IGNORECASE,
)
_ROUTE_OR_DATE = re.compile(
    r"\b[A-Z]{3}\b(?<!USA)(?<!EST)|\b\d{4}-\d{2}-\d{2}\b|\bfrom [A-Z][a-z]+.{0,30}\bto [A-Z][a-z]+"
)
_RAISES_COMPENSATION = re.compile(
    r"\b(?:offer|look into|arrange|provide|issue|discuss|see what)\b[^.?!\n]{0,60}\bcompensat\w*|"
    r"\bregarding compensation\b",
    re.IGNORECASE,
)
_ASKED_FOR_COMPENSATION = re.compile(
    r"\bcompensat\w*|\bcertificate|\bvoucher|\bcredit\b|\brefund|\breimburs\w*|"
    r"\bmake (?:it|this|that) up|\bgesture\b",
    re.IGNORECASE,
)
_PART = r"(?:outbound|outgoing|return|first|second|one)"
_PARTIAL_CABIN = re.compile(
    rf"\bupgrad\w*\b[^.?!\n]{{0,80}}\b(?:only|just)\b(?: for)?(?: the)? {_PART}\b"
    rf"[^.?!\n]{{0,20}}\b(?:flights?|legs?|segments?|passengers?)\b|\b(?:only|just)\b(?: the)? {_PART}\b"
    rf"[^.?!\n]{{0,30}}\b(?:to|in) business\b|\bwhile keeping\b[^.?!\n]{{0,40}}\bin (?:basic )?economy\b|"
    rf"\bupgrad\w*\b[^.?!\n]{{0,80}}\b{_PART} (?:flights?|legs?|segments?) only\b",
    re.IGNORECASE,
)
_PARTIAL_WORDS = ("only", "just", "while keeping")  # every match of _PARTIAL_CABIN holds one
_DECLINES = re.compile(
    r"\b(?:cannot|can['’]?t|unable|not (?:possible|allowed|permitted)|same cabin|must|requires?|policy)\b",
    re.IGNORECASE,
)
_INSURANCE_BENEFIT = re.compile(
    r"\binsurance\b[^.?!\n]{0,60}\b(?:covers?|waives?|waived|pays? for|applies to)\b[^.?!\n]{0,50}"
    r"\b(?:fees?|difference|increase|changes?|costs?|upgrade|bags?|fare)\b",
    re.IGNORECASE,
)
_REFUND_PROMISE = re.compile(
    r"\b(?:eligible|entitled|qualif(?:y|ies|ied))\b[^.?!\n]{0,100}\brefund|\byou(?:['’]ll| will) (?:get|receive) "
    r"a full refund|\bcancel\w*[^.?!\n]{0,40}\bwith a full refund|\b(?:proceed|process)\w*\b[^.?!\n]{0,20}"
    r"\b(?:a |the |your )?(?:full )?refund",
    re.IGNORECASE,
)
_SAID_RECENT = re.compile(r"\bwithin (?:the )?(?:last |past )?24 hours\b", re.IGNORECASE)
_NO_REFUND_CANCEL = re.compile(
    r"\bcancel\w*\b[^.?!\n]{0,60}?(?P<forfeit>\bwithout (?:a |any )?refund|\(?no refund (?:will|would) be "
    r"(?:issued|given|provided)\)?|\band forfeit)",
    re.IGNORECASE,
)
_BASIC_CABIN_REFUSED = re.compile(
    r"\b(?:upgrad\w*|cabin)\b[^.?!\n]{0,60}\bbasic economy\b[^.?!\n]{0,40}\b(?:not (?:allowed|permitted|"
    r"possible|eligible)|cannot|can['’]?t)\b|\bbasic economy\b[^.?!\n]{0,40}\b(?:cannot|can['’]?t|not "
    r"(?:allowed|permitted|eligible)(?: to)?)(?: be)? (?:upgraded\b|(?:change|upgrade)\w* (?:the |its |"
    r"their )?cabin)",
    re.IGNORECASE,
)
_CABIN_ALLOWED = re.compile(r"\bcabin (?:class )?(?:can|may)\b", re.IGNORECASE)
_STATES_A_RULE = re.compile(
    r"\b(?:only|must|requires?|required|policy)\b", re.IGNORECASE
)  # explaining a rule offers nothing
_REQUIRES = re.compile(r"\b(?:must|requires?|required|policy)\b", re.IGNORECASE)
_CERTIFICATE_AMOUNT = re.compile(
    r"\$(\d{2,4})(?:\.00)?(?![\d,])(?!\**\s*(?:(?:per|for each|each|a|x)\b|[/×]))(?!\s*\*\s*\d)", re.IGNORECASE
)  # a rate ("$50 per passenger", "$50 × 2") is no total
_GESTURE = re.compile(r"\b(?:certificate|voucher|compensation)\b", re.IGNORECASE)
_TO_BE_SEEN = re.compile(
    r"\b(?:determine|check|once|only|outside|beyond)\b|\bpolic(?:y|ies) (?:states?|says?)\b", re.IGNORECASE
)


def _claims(
    conversation: Conversation, words: tuple[str, ...], pattern: re.Pattern, hedges: re.Pattern | None = None
) -> Iterator[tuple[int, str, str]]:
    """(index, message, clause) for each agent clause that asserts `pattern`; only messages holding
    one of `words` (lower case; every match of `pattern` holds one) are read."""
    for index, text in conversation.texts("assistant"):
        lowered = text.lower()
        if any(word in lowered for word in words) and pattern.search(text):
            for clause in assertions(text, hedges):
                if pattern.search(clause):
                    yield index, text, clause


def _compensation_offers(conversation: Conversation) -> Iterator[Finding]:
    """Offering a certificate or compensation before confirming the facts (no reservation read, or
    every flight status checked shows no disruption), or to a user the policy gives none."""
    for index, text in conversation.texts("assistant"):
        if "$" not in text or not _OFFER.search(text):
            continue
        profile, read = user(conversation, index), reservations(conversation, index)
        if not read:
            yield Finding(
                "precondition_verification", index, f"offers compensation before reading any reservation: {text}"
            )
        elif statuses := undisrupted_statuses(conversation, index):
            yield Finding(
                "precondition_verification",
                index,
                f"offers compensation though every flight status checked shows "
                f"no disruption ({', '.join(statuses)}): {text}",
            )
        if profile is not None and not may_compensate(profile, read):
            yield Finding(
                "policy_compliance",
                index,
                f"offers compensation to a {profile.get('membership')} member with "
                f"no insurance or business cabin: {text}",
            )
        return


def _unasked_compensation(conversation: Conversation) -> Iterator[Finding]:
    """Raising compensation before the user asked for any."""
    for index, _text, clause in _claims(conversation, ("compensat",), _RAISES_COMPENSATION, _STATES_A_RULE):
        if not _ASKED_FOR_COMPENSATION.search(conversation.user_text(index)):
            yield Finding("policy_compliance", index, f"offers compensation the user did not ask for: {clause!r}")
            return


def _partial_cabin_offers(conversation: Conversation) -> Iterator[Finding]:
    """Offering to change the cabin of some flights or passengers of a reservation only, or pricing
    such a change the user asked for instead of declining it."""
    for index, _text, clause in _claims(conversation, _PARTIAL_WORDS, _PARTIAL_CABIN, _REQUIRES):
        yield Finding("policy_compliance", index, f"offers a cabin change for part of a reservation: {clause!r}")
        return
    for index, text in conversation.texts(
        "assistant"
    ):  # priced, even as a condition ("if you upgrade only ..., it costs $152")
        priced = [
            s
            for s in sentences(text)
            if "$" in s and _PARTIAL_CABIN.search(s) and not _DECLINES.search(s) and not negated(s)
        ]
        if priced:
            yield Finding("policy_compliance", index, f"prices a cabin change for part of a reservation: {priced[0]!r}")
            return
    for asked, request in conversation.texts("user"):
        if any(word in request.lower() for word in _PARTIAL_WORDS) and _PARTIAL_CABIN.search(request):
            reply = next(iter(conversation.texts("assistant", asked + 1)), None)
            if reply and "$" in reply[1] and not _DECLINES.search(reply[1]):
                yield Finding(
                    "policy_compliance",
                    reply[0],
                    f"prices the cabin change for part of a reservation the user "
                    f"asked for instead of declining it: {reply[1]}",
                )
                return


def _basic_cabin_refusals(conversation: Conversation) -> Iterator[Finding]:
    """Saying a basic economy reservation cannot change (or upgrade) its cabin: the policy lets every
    reservation, basic economy included, change cabin without changing its flights."""
    for index, text in conversation.texts("assistant"):
        if "basic economy" in text.lower():
            refusals = [s for s in sentences(text) if _BASIC_CABIN_REFUSED.search(s) and not _CABIN_ALLOWED.search(s)]
            if refusals:
                yield Finding("policy_compliance", index, f"says basic economy cannot change cabin: {refusals[0]!r}")
                return


def _insurance_benefits(conversation: Conversation) -> Iterator[Finding]:
    """Saying travel insurance covers something other than a cancellation for health or weather."""
    for index, _text, clause in _claims(conversation, ("insurance",), _INSURANCE_BENEFIT, _STATES_A_RULE):
        yield Finding("policy_compliance", index, f"claims an insurance benefit the policy does not give: {clause!r}")
        return


def _refund_promises(conversation: Conversation) -> Iterator[Finding]:
    """Promising a refund for cancelling a reservation the policy does not let the agent cancel
    (the one reservation the clause or else the message names, else the last one read)."""
    for index, text, clause in _claims(conversation, ("refund",), _REFUND_PROMISE, _TO_BE_SEEN):
        read = reservations(conversation, index)
        named = [r for r in read if mentions(clause, r.get("reservation_id"))] or [
            r for r in read if mentions(text, r.get("reservation_id"))
        ]
        target = named[0] if len(named) == 1 else None if named else (read[-1] if read else None)
        record = target and reservation(conversation, target.get("reservation_id"), None, first=True)
        refused = record and cancellation_refused(conversation, record, index)
        if refused:
            yield Finding(
                "policy_compliance", index, f"promises a refund the policy does not grant ({refused[0]}): {clause!r}"
            )
            if refused[1] and (gone := flown_unnoticed(conversation, record, index)):
                yield unflown_reading(record, gone, index)
            elif not refused[1] and _SAID_RECENT.search(text):
                yield Finding(
                    "structured_data_reasoning",
                    index,
                    f"says {record.get('reservation_id')} was booked within 24 "
                    f"hours, but it was created {record.get('created_at')}: {text!r}",
                )
            return


def _unrefunded_cancellations(conversation: Conversation) -> Iterator[Finding]:
    """Offering to cancel without a refund: the policy cancels only under its conditions, always
    with a refund (to the original payment methods), so a cancellation that forfeits the fare is an
    option it does not have."""
    for index, text in conversation.texts("assistant"):
        lowered = text.lower()
        if "cancel" not in lowered or not ("refund" in lowered or "forfeit" in lowered):
            continue
        for sentence in re.split(r"(?<=[.!?\n])", text):
            offer = _NO_REFUND_CANCEL.search(sentence)
            if offer and not negated(sentence.replace(offer.group("forfeit"), "")):
                yield Finding(
                    "policy_compliance",
                    index,
                    f"offers a cancellation without a refund, which the policy does not provide: {sentence.strip()!r}",
                )
                return


def _membership_claims(conversation: Conversation) -> Iterator[Finding]:
    """Stating a membership level the user's profile contradicts (a misreading), or one no profile
    read had established (a condition of compensation and bags asserted unverified)."""
    for index, text in conversation.texts("assistant"):
        claim = "member" in text.lower() and _MEMBER_CLAIM.search(text)
        if not claim:
            continue
        profile = user(conversation, index)
        if profile is None:
            yield Finding(
                "precondition_verification",
                index,
                f"says {claim.group(0)!r} without having read the user's profile: {text}",
            )
            return
        if claim.group(1).lower() != str(profile.get("membership")).lower():
            yield Finding(
                "structured_data_reasoning",
                index,
                f"says {claim.group(0)!r}; the profile's membership is {profile.get('membership')}: {text}",
            )
            return


def _unread_reservation_claims(conversation: Conversation) -> Iterator[Finding]:
    """Describing a reservation that was never read (its state asserted, not established): a
    sentence naming it with a route or date the user had not given (listing the profile's
    reservation ids, or repeating the user's "the one from MCO", describes none)."""
    known = {str(r) for _, obj in conversation.records("reservations") for r in listed(obj.get("reservations"))}
    for index, text in conversation.texts("assistant"):
        for sentence in sentences(text):
            named = [rid for rid in sorted(known) if mentions(sentence, rid)]
            if not named or not any(
                not conversation.said_by_user(m.group(0), index) for m in _ROUTE_OR_DATE.finditer(sentence)
            ):
                continue
            for rid in named:
                if reservation(conversation, rid, index) is None:
                    yield Finding(
                        "precondition_verification",
                        index,
                        f"describes reservation {rid} without having read it: {text}",
                    )
                    return


def _flown_claims(conversation: Conversation) -> Iterator[Finding]:
    """Saying a reservation's flights were already flown ("both flights have already taken off")
    when none was: all dated today or later and none reported landed or flying. The reservation is
    the one the claim names, or the last one read when the message names none."""
    if conversation.now is None:
        return
    for index, text in conversation.texts("assistant"):
        if not SAID_FLOWN.search(text):
            continue
        claims = [clause for clause in assertions(text) if SAID_FLOWN.search(clause)]
        read = reservations(conversation, index) if claims else []
        if not read:
            continue
        named = [r for r in read if any(mentions(clause, r.get("reservation_id")) for clause in claims)]
        if not named and not any(mentions(text, r.get("reservation_id")) for r in read):
            named = read[-1:]
        for record in named:
            if flown(conversation, record, index) is None:
                dates = ", ".join(str(f.get("date")) for f in dicts(record.get("flights")))
                yield Finding(
                    "structured_data_reasoning",
                    index,
                    f"says {record.get('reservation_id')} was already flown, but "
                    f"its flights are dated {dates}, after today: {claims[0]!r}",
                )
                return


def _certificate_amounts(conversation: Conversation) -> Iterator[Finding]:
    """A certificate sent, or offered in a sentence that also names a passenger count, for a
    multiple of a gesture's per-passenger amount that no reservation read gives: the passengers
    counted from what the user claimed, not from the record. A certificate the profile already holds
    (its balance) is no offer."""
    per_passenger = sorted(CERTIFICATE_PER_PASSENGER.values())
    for index, message in enumerate(conversation.messages):
        if message.role != "assistant":
            continue
        read = reservations(conversation, index)
        if not read:
            continue
        due = {rate * len(listed(r.get("passengers"))) for r in read for rate in per_passenger}
        held = {
            m.get("amount")
            for m in held_methods(conversation, index)
            if m.get("source") == "certificate" and isinstance(m.get("amount"), (int, float))
        }
        offered = [
            (call.arguments["amount"], f"send_certificate({call.arguments['amount']})")
            for call in message.tool_calls
            if call.name == "send_certificate" and isinstance(call.arguments.get("amount"), int)
        ]
        offered += [
            (int(amount), sentence)
            for sentence in sentences(message.content or "")
            if _GESTURE.search(sentence) and "passenger" in sentence.lower()
            for amount in _CERTIFICATE_AMOUNT.findall(sentence)
        ]
        for amount, where in offered:
            if (
                amount not in due
                and amount not in held
                and any(amount % rate == 0 and amount // rate <= 9 for rate in per_passenger)
            ):
                yield Finding(
                    "structured_data_reasoning",
                    index,
                    f"a ${amount} certificate, but ${' or $'.join(map(str, sorted(due)))} "
                    f"is what the passengers of the reservations read give: {where}",
                )
                return


RULES = (
    ConversationRule(
        "Only compensate if the user is a silver/gold member or has travel insurance or flies business.",
        _compensation_offers,
    ),
    ConversationRule(
        "Do not proactively offer a compensation unless the user explicitly asks for one.", _unasked_compensation
    ),
    ConversationRule(
        "Cabin class must remain the same across all the flights in the same reservation; changing cabin for just "
        "one flight segment is not possible.",
        _partial_cabin_offers,
    ),
    ConversationRule(
        "all reservations, including basic economy, can change cabin without changing the flights",
        _basic_cabin_refusals,
    ),
    ConversationRule(
        "The travel insurance is 30 dollars per passenger and enables full refund if the user needs to cancel the "
        "flight given health or weather reasons.",
        _insurance_benefits,
    ),
    ConversationRule("Otherwise, flight can be cancelled if any of the following is true", _refund_promises),
    ConversationRule("Otherwise, flight can be cancelled if any of the following is true", _unrefunded_cancellations),
    ConversationRule("There are three membership levels", _membership_claims),
    ConversationRule(
        "If the user doesn't know their reservation id, the agent should help locate it using available tools.",
        _unread_reservation_claims,
    ),
    ConversationRule("Otherwise, flight can be cancelled if any of the following is true", _flown_claims),
    ConversationRule(
        "the agent can offer a certificate as a gesture after confirming the facts, with the amount being $100 times "
        "the number of passengers.",
        _certificate_amounts,
    ),  # the wording both policy versions share
)
