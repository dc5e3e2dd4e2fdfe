"""The checks a domain declaration can ask for, built from their parameters (`rules.declared` reads
the parameters from a TOML or JSON file and validates them).

Each builder returns an `ActionRule` (a check over one write), a `ConversationRule` (a check over
the whole conversation) or, for `transfer_only_when`, the predicate `Domain.transfer_called_for`
takes. A finding's text states its decisive part first and ends with the policy sentence it breaks,
quoted. A record a rule reads is the earliest object the tool results before the write showed with
the record's key equal to the write's argument (the state before the agent changed it); a rule
that needs a record nobody read finds nothing (writing to an unread record is `checks.unread_records`').
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from typing import Any

from tracegym.analysis.detectors import canonical, render
from tracegym.analysis.rules.conversation import Call, Conversation, mentions, negated, normal
from tracegym.analysis.rules.domain import ActionRule, ConversationRule, Finding

TESTS = ("in", "not_in", "matches", "within_days", "outside", "differs_from")
REACH = 60  # characters between the words that name an amount and the amount
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_AMOUNT = re.compile(
    r"[$€£]\s?(\d[\d,]*(?:\.\d+)?)|(\d[\d,]*(?:\.\d+)?)\s?(?:USD|EUR|GBP|dollars|euros|pounds)\b", re.IGNORECASE
)
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")
_CONTRAST = re.compile(r"[;:]|\b(?:but|however|although|though|whereas|yet)\b", re.IGNORECASE)
_REPORTED = re.compile(
    r"\byou(?:['’]d| would)? (?:like|want|wish|asked|are asking|['’]re asking|requested)\b|\byour request\b",
    re.IGNORECASE,
)  # the user's wish restated, not the agent's offer


def quoted(policy: str) -> str:
    return f"“{policy}”"


@lru_cache(maxsize=256)
def _today_in(policy: str, pattern: re.Pattern | None) -> date | None:
    found = pattern.search(policy) if pattern is not None else None
    return as_date(found.group(1)) if found else None


def today(conversation: Conversation, pattern: re.Pattern | None) -> date | None:
    """Today's date as the run's policy states it (`pattern`'s one group, YYYY-MM-DD), else the
    τ² "current time" line, else None."""
    found = _today_in(str(conversation.trajectory.metadata.get("policy") or ""), pattern)
    if found is None and conversation.now is not None:
        return conversation.now.date()
    return found


def as_date(value: Any) -> date | None:
    """A value that starts with a YYYY-MM-DD date as that date; None for anything else."""
    text = str(value)
    if not _ISO_DATE.match(text):
        return None
    try:
        return date.fromisoformat(text[:10])
    except ValueError:
        return None


def as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).replace(",", ""))
    except ValueError:
        return None


def earliest_record(
    conversation: Conversation, key: str, value: Any, before: int, fields: frozenset[str] = frozenset()
) -> dict | None:
    """The first object the tool results before message `before` showed with `key` equal to
    `value` and holding every one of `fields` (None: none)."""
    if value is None:
        return None
    wanted = canonical(value)
    for _, obj in conversation.records(key, before):
        if canonical(obj.get(key)) == wanted and fields <= obj.keys():
            return obj
    return None


def latest_result(conversation: Conversation, source: str, before: int) -> Any:
    """The result of the latest successful call of tool `source` ("tool", or "tool.field" for a field
    of its result) made before message `before`; None when there is none."""
    tool, _, field = source.partition(".")
    for call in reversed(conversation.agent_calls):
        if call.name == tool and not call.error and call.result_index is not None and call.result_index < before:
            if not field:
                return call.output
            return call.output.get(field) if isinstance(call.output, dict) else None
    return None


@dataclass(frozen=True)
class Facts:
    """What a condition is evaluated on: one write's `arguments` (made at message `before`), the
    record it names (None: none needed or none read) and today's date (None: unknown)."""

    conversation: Conversation
    arguments: dict[str, Any]
    record: dict | None
    before: int
    today: date | None


@dataclass(frozen=True)
class Condition:
    """One test on a write: on `field` of the record it names (`subject` "field") or on one of its
    arguments (`subject` "argument"). Tests: `in` / `not_in` a list of values; `matches` a regular
    expression (whole value); `within_days` N: a date less than N days after today; `outside` [low,
    high]: a number, or with `span_to` the days from this date to that one, below low or above
    high; `differs_from` "tool" or "tool.field": not the latest result of that tool."""

    subject: str
    name: str
    test: str
    value: Any
    span_to: str | None = None

    def _get(self, facts: Facts, name: str) -> Any:
        if self.subject == "field":
            return facts.record.get(name) if facts.record is not None else None
        return facts.arguments.get(name)

    def measure(self, facts: Facts) -> Any:
        """The value tested (for `outside` with `span_to`: the days between the two dates)."""
        value = self._get(facts, self.name)
        if self.test == "outside" and self.span_to is not None:
            start, end = as_date(value), as_date(self._get(facts, self.span_to))
            return (end - start).days if start and end else None
        return value

    def holds(self, facts: Facts) -> bool:
        """Whether the test holds; False where the value it needs is missing."""
        value = self.measure(facts)
        if value is None:
            return False
        if self.test == "in":
            return canonical(value) in {canonical(v) for v in self.value}
        if self.test == "not_in":
            return canonical(value) not in {canonical(v) for v in self.value}
        if self.test == "matches":
            return re.fullmatch(self.value, str(value)) is not None
        if self.test == "within_days":
            day = as_date(value)
            return day is not None and facts.today is not None and (day - facts.today).days < self.value
        if self.test == "outside":
            number = as_number(value)
            return number is not None and not self.value[0] <= number <= self.value[1]
        result = latest_result(facts.conversation, self.value, facts.before)  # differs_from
        return result is not None and canonical(str(value)) != canonical(str(result))

    def shown(self, facts: Facts) -> str:
        """The condition as it held: "rate_plan is 'non_refundable'"."""
        value = self.measure(facts)
        if self.test == "within_days":
            return f"{self.name} {value} is less than {self.value} days after today ({facts.today})"
        if self.test == "outside":
            what = f"{self.span_to} is {value} days after {self.name}" if self.span_to else f"{self.name} is {value}"
            return f"{what}, outside {self.value[0]}-{self.value[1]}"
        if self.test == "differs_from":
            result = latest_result(facts.conversation, self.value, facts.before)
            return f"{self.name} {value!r} is not {self.value}'s result {result!r}"
        return f"{self.name} is {value!r}"


def read_before(
    policy: str, writes: frozenset[str], reads: frozenset[str], key: str, shows: str | None, capability: str
) -> ActionRule:
    """A write on the record named by argument `key` ("ARG", or "ARG.FIELD": the record named by
    FIELD of the record ARG names) only after a successful call of one of `reads` showed that
    record (holding field `shows`, when given)."""
    argument, _, via = key.partition(".")

    def check(conversation: Conversation, name: str, arguments: dict[str, Any], before: int) -> Iterator[Finding]:
        value, key_name = arguments.get(argument), argument
        if via:
            record = earliest_record(conversation, argument, value, before, frozenset({via}))
            if record is None:
                return
            value, key_name = record[via], via
        if value is None:
            return
        shown_by = {c.result_index for c in conversation.agent_calls if c.name in reads and not c.error}
        wanted = canonical(value)
        if not any(
            at in shown_by and canonical(obj.get(key_name)) == wanted and (shows is None or shows in obj)
            for at, obj in conversation.records(key_name, before)
        ):
            tools = " or ".join(sorted(reads))
            yield Finding(
                capability,
                before,
                f"{name} on {key_name}={value!r} before {tools} showed it: {render(name, arguments)}; the policy: "
                f"{quoted(policy)}",
            )

    return ActionRule(policy, writes, check)


def forbidden(
    policy: str,
    writes: frozenset[str],
    record_key: str | None,
    when: tuple[Condition, ...],
    unless: tuple[Condition, ...],
    today_pattern: re.Pattern | None,
    capability: str,
) -> ActionRule:
    """A write the policy forbids where every condition of `when` holds and none of `unless` does,
    on the record its argument `record_key` names (conditions on fields need that record read)."""
    fields = frozenset(
        name for c in when + unless if c.subject == "field" for name in (c.name, c.span_to) if name is not None
    )

    def check(conversation: Conversation, name: str, arguments: dict[str, Any], before: int) -> Iterator[Finding]:
        record = None
        if record_key is not None:
            record = earliest_record(conversation, record_key, arguments.get(record_key), before, fields)
            if record is None and fields:
                return
        facts = Facts(conversation, arguments, record, before, today(conversation, today_pattern))
        if all(c.holds(facts) for c in when) and not any(c.holds(facts) for c in unless):
            named = f"({record_key}={arguments.get(record_key)!r})" if record_key else ""
            shown = "; ".join(c.shown(facts) for c in when)
            yield Finding(capability, before, f"{name}{named}: {shown}; the policy: {quoted(policy)}")

    return ActionRule(policy, writes, check)


def argument_format(
    policy: str, writes: frozenset[str], arguments_checked: tuple[str, ...], pattern: re.Pattern, capability: str
) -> ActionRule:
    """Each of `arguments_checked` a write gives written as `pattern` asks (the whole value)."""

    def check(conversation: Conversation, name: str, arguments: dict[str, Any], before: int) -> Iterator[Finding]:
        for argument in arguments_checked:
            value = arguments.get(argument)
            if value is not None and pattern.fullmatch(str(value)) is None:
                yield Finding(
                    capability,
                    before,
                    f"{name}: {argument}={value!r} is not written as /{pattern.pattern}/; the policy: {quoted(policy)}",
                )

    return ActionRule(policy, writes, check)


def argument_seen(
    policy: str, writes: frozenset[str], arguments_checked: tuple[str, ...], anywhere: bool, capability: str
) -> ActionRule:
    """Each of `arguments_checked` a write gives a value an earlier tool result showed (with
    `anywhere`: that a tool result or a message before the write held)."""

    def check(conversation: Conversation, name: str, arguments: dict[str, Any], before: int) -> Iterator[Finding]:
        for argument in arguments_checked:
            value = arguments.get(argument)
            if value is None or not str(value).strip():
                continue
            seen = conversation.seen(value, before) if anywhere else conversation.seen_in_outputs(value, before)
            if not seen:
                where = "nowhere earlier in the conversation" if anywhere else "in no earlier tool result"
                yield Finding(
                    capability, before, f"{name}: {argument}={value!r} appears {where}; the policy: {quoted(policy)}"
                )

    return ActionRule(policy, writes, check)


def call_first(policy: str, tool: str, later: frozenset[str] | None, capability: str) -> ConversationRule:
    """A successful call of `tool` before any call of the tools in `later` (None: any other tool)."""

    def check(conversation: Conversation) -> Iterator[Finding]:
        for call in conversation.agent_calls:
            if call.name == tool and not call.error:
                return
            if call.name != tool and (later is None or call.name in later):
                yield Finding(
                    capability,
                    call.index,
                    f"{call.name} before {tool}: {render(call.name, call.arguments)}; the policy: {quoted(policy)}",
                )
                return

    return ConversationRule(policy, check)


def _part(text: str, start: int, end: int) -> str:
    """The part of the sentence around text[start:end] between contrast words ("but", ";", ":")."""
    left = max((m.end() for m in _SENTENCE_END.finditer(text, 0, start)), default=0)
    right = next((m.start() for m in _SENTENCE_END.finditer(text, end)), len(text))
    sentence = text[left:right]
    offset = start - left
    cuts = list(_CONTRAST.finditer(sentence))
    low = max((m.end() for m in cuts if m.end() <= offset), default=0)
    high = min((m.start() for m in cuts if m.start() >= offset + (end - start)), default=len(sentence))
    return sentence[low:high]


def never_say(policy: str, pattern: re.Pattern, capability: str) -> ConversationRule:
    """No agent message offers or grants what `pattern` names: the first match whose sentence part
    (between "but", "however", ";", ":" and sentence ends) holds no negation and does not restate
    the user's wish ("you'd like a discount") is a finding."""

    def check(conversation: Conversation) -> Iterator[Finding]:
        for index, text in conversation.texts("assistant"):
            for match in pattern.finditer(text):
                part = _part(text, match.start(), match.end())
                if not negated(part) and not _REPORTED.search(part):
                    yield Finding(
                        capability, index, f"says {part.strip()!r}; the policy: {quoted(policy)}: {text.strip()}"
                    )
                    return

    return ConversationRule(policy, check)


def stated_amounts(text: str, says: re.Pattern) -> list[tuple[float, str]]:
    """The amounts `text` names with the words `says`, each with its clause (the part of its
    sentence between semicolons): per match, the nearest amount after it in the same sentence
    within REACH characters, else the nearest before it."""
    amounts = [(m.start(), m.end(), as_number(m.group(1) or m.group(2))) for m in _AMOUNT.finditer(text)]
    found = []
    for match in says.finditer(text):
        end = next((m.start() for m in _SENTENCE_END.finditer(text, match.end())), len(text))
        start = max((m.end() for m in _SENTENCE_END.finditer(text, 0, match.start())), default=0)
        after = [a for a in amounts if match.end() <= a[0] <= min(end, match.end() + REACH)]
        before = [a for a in amounts if max(start, match.start() - REACH) <= a[1] <= match.start()]
        chosen = after[0] if after else before[-1] if before else None
        if chosen is not None and chosen[2] is not None:
            low = max(start, text.rfind(";", start, min(chosen[0], match.start())) + 1)
            semicolon = text.find(";", max(chosen[1], match.end()), end)
            found.append((chosen[2], text[low : end if semicolon < 0 else semicolon]))
    return found


def _sentences(text: str) -> list[str]:
    return [part for part in re.split(r"(?<=[.!?])\s+|\n", text) if part.strip()]


def _write_amount(
    conversation: Conversation, call: Call, field: str, change: bool, record_keys: tuple[str, ...]
) -> float | None:
    """`field` of the write's result, or with `change` that minus the same field of its record as
    read before the write."""
    output = call.output if isinstance(call.output, dict) else {}
    value = as_number(output.get(field)) if field in output else None
    if value is None or not change:
        return value
    for key in record_keys:
        if key in output:
            record = conversation.record(key, output[key], call.index, with_key=field)
            old = as_number(record.get(field)) if record is not None else None
            return None if old is None else value - old
    return None


def _unwritten_records(conversation: Conversation, text: str, window: list[Call], record_keys: tuple[str, ...]) -> bool:
    """Whether `text`, outside its negated sentences, names a record (an id under a record key the
    `window`'s writes take) that none of those writes changed: it speaks of work proposed, refused
    or left undone, whose amounts no write shows."""
    keys = [k for k in record_keys if any(k in c.arguments for c in window)]
    written = {canonical(c.arguments[k]) for c in window for k in keys if k in c.arguments}
    ids = {obj[k] for k in keys for _, obj in conversation.records(k) if isinstance(obj.get(k), (str, int))}
    spoken = [sentence for sentence in _sentences(text) if not negated(sentence)]
    return any(
        canonical(record) not in written and any(mentions(sentence, record) for sentence in spoken) for record in ids
    )


def _describes(text: str, details: list[tuple[Any, ...]]) -> bool:
    """Whether `text` names every detail (any of its alternatives)."""
    return all(any(mentions(text, alternative) for alternative in detail) for detail in details)


def stated_amount(
    policy: str,
    writes: frozenset[str],
    says: re.Pattern,
    field: str,
    change: bool,
    record_keys: tuple[str, ...],
    capability: str,
    details: Callable[[Call, Conversation], list[tuple[Any, ...]] | None] = lambda call, conversation: None,
) -> ConversationRule:
    """An amount an agent message names with the words `says` is what the writes it proposes or
    reports amount to: the writes of `writes` made between the agent's previous message and its
    next one (its window), each worth `field` of its result (with `change`: its change over the
    record read before the write). An amount whose clause names the records of some of those writes
    is one of theirs or their sum; any other amount is the sum over the whole window. A message is
    not checked where it speaks of other work than its window's writes (its figures may be right for
    that work): where it names a record none of them changed, or leaves out a detail of one of them
    (`details`, the domain's confirmation details: dates other than those written). Compared to the
    cent."""

    def check(conversation: Conversation) -> Iterator[Finding]:
        made = [c for c in conversation.agent_calls if c.name in writes and not c.error]
        texts = conversation.texts("assistant")
        for position, (index, text) in enumerate(texts):
            stated = stated_amounts(text, says)
            low = texts[position - 1][0] if position else -1
            high = texts[position + 1][0] if position + 1 < len(texts) else len(conversation.messages)
            window = [
                (c, a)
                for c in made
                if low < c.index < high
                for a in [_write_amount(conversation, c, field, change, record_keys)]
                if a is not None
            ]
            calls = [c for c, _ in window]
            if (
                not stated
                or not window
                or _unwritten_records(conversation, text, calls, record_keys)
                or not all(_describes(text, details(c, conversation) or []) for c in calls)
            ):
                continue
            for amount, clause in stated:
                own = [
                    a
                    for c, a in window
                    if any(mentions(clause, c.arguments[k]) for k in record_keys if c.arguments.get(k) is not None)
                ]
                supported = [*own, sum(own)] if own else [sum(a for _, a in window)]
                if not any(abs(abs(amount) - abs(s)) < 0.005 for s in supported):
                    yield Finding(
                        capability,
                        index,
                        f"states {amount:,.2f} where the writes come to {abs(supported[-1]):,.2f}; the policy: "
                        f"{quoted(policy)}: " + text.strip(),
                    )
                    return

    return ConversationRule(policy, check)


def transfer_only_when(policy: str, key: str, when: tuple[Condition, ...]) -> Callable[[Conversation, int], bool]:
    """`Domain.transfer_called_for`: the run's policy holds `policy` (or none was recorded) and a
    record holding `key` read before message `before` meets every condition of `when`."""
    fields = frozenset(c.name for c in when)

    def called_for(conversation: Conversation, before: int) -> bool:
        if conversation.policy and normal(policy) not in conversation.policy:
            return False
        for _, record in conversation.records(key, before):
            facts = Facts(conversation, {}, record, before, None)
            if fields <= record.keys() and all(c.holds(facts) for c in when):
                return True
        return False

    return called_for
