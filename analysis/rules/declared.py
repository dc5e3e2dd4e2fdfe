"""Domains declared as data: a TOML or JSON file, or the mapping it holds, read into a `Domain`.

A declaration (every key is checked: an unknown key, a wrong type, a missing field, a regular
expression that does not compile, a tool both read and write, a rule on an undeclared tool or a
policy sentence missing from the policy file is a `DeclarationError` naming the file and the key):

    name = "hotel"                  # the runs' domain (τ²: info.environment_info.domain_name)
    policy_file = "policy.md"       # optional, relative to this file: each rule's `policy` must occur in it
    record_keys = ["reservation_id", "guest_id"]  # the arguments that name the record a write changes
    derived = ["hotel_id"]          # optional: write arguments chosen by reasoning over tool data
    today = 'Today is (\\d{4}-\\d{2}-\\d{2})'    # optional: how the policy states today (one group)
    preconditions_always = false    # optional, see `Domain`
    workflow = false                # optional, see `Domain`

    [tools]
    read = ["get_reservation_details", ...]   # every tool that only reads
    write = ["cancel_reservation", ...]       # every tool that changes the state

    [confirmation]                  # optional: the writes the user must confirm
    policy = "Write only after the guest answers yes"
    [confirmation.details]          # per write, what the agent must have named before the user's yes:
    cancel_reservation = ["reservation_id"]   # an argument's value, or ARG.FIELD (a field of the record
    book_reservation = ["hotel_id|hotel_id.name", "check_in"]  # that ARG names); "|" separates alternatives

    [[rules]]                       # any number of rules, each of one kind
    kind = "forbidden"
    policy = "C2 Non-refundable reservations cannot be cancelled."   # the sentence it implements
    capability = "policy_compliance"  # optional: overrides the kind's capability
    ...                             # the kind's own keys (RULE_KINDS)

A rule applies to a run whose recorded policy holds its `policy` sentence (or that recorded none).
Conditions (`when`, `unless`) are tables: `field = F` (of the record) or `argument = A` (of the
write), and one test: `in = [...]`, `not_in = [...]`, `matches = REGEX`, `within_days = N` (a date
less than N days after today), `outside = [LOW, HIGH]` (with `span_to = NAME`: the days from this
date to that one), `differs_from = "tool"` or `"tool.field"` (the latest result of that tool).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracegym.analysis.catalogue import CATALOGUE
from tracegym.analysis.rules import declared_checks as make
from tracegym.analysis.rules.conversation import Call, Conversation, normal
from tracegym.analysis.rules.declared_checks import TESTS, Condition
from tracegym.analysis.rules.domain import TRANSFER, ActionRule, ConversationRule, Domain
from tracegym.errors import UserError

CAPABILITIES = tuple(c.name for c in CATALOGUE if "tau" in c.benchmarks)  # what a rule's findings may name
RULE_KINDS = {
    "read_before": ("precondition_verification", "writes, read (tools), key (ARG or ARG.FIELD), shows (optional)"),
    "forbidden": ("policy_compliance", "writes, record (optional ARG), when (conditions), unless (optional)"),
    "argument_format": ("tool_calling_precision", "writes, arguments, pattern"),
    "argument_seen": ("tool_calling_precision", "writes, arguments, seen_in (tool_results or conversation)"),
    "call_first": ("policy_compliance", "tool, before (optional tools)"),
    "never_say": ("policy_compliance", "pattern"),
    "stated_amount": ("structured_data_reasoning", "writes, says (regex), amount (result field), change (optional)"),
    "transfer_only_when": ("policy_compliance", "record (a key), when (conditions on its fields)"),
}  # kind: (the capability its findings name, its keys)
_REQUIRED = object()
_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "a table",
}


class DeclarationError(UserError):
    """A domain declaration that cannot be read: the message names the file, the key and the problem."""


class _Table:
    """One table of a declaration, read key by key: `take` checks each key's type, `close` rejects the
    keys never taken."""

    def __init__(self, data: Any, where: str, origin: str) -> None:
        self.where, self.origin = where, origin
        if not isinstance(data, dict):
            raise self.error(f"expected a table, got {_shown(data)}")
        self.data, self.taken = data, set()

    def error(self, problem: str, key: str | None = None) -> DeclarationError:
        at = ".".join(part for part in (self.where, key) if part)
        return DeclarationError(f"{self.origin}: {at + ': ' if at else ''}{problem}")

    def take(self, key: str, kind: type | tuple[type, ...], default: Any = _REQUIRED) -> Any:
        self.taken.add(key)
        if key not in self.data:
            if default is _REQUIRED:
                raise self.error("missing (required)", key)
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise self.error(f"expected {' or '.join(_TYPE_NAMES[k] for k in kinds)}, got {_shown(value)}", key)
        return value

    def text(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.take(key, str, default)
        if isinstance(value, str) and not value.strip():
            raise self.error("must not be empty", key)
        return value

    def names(self, key: str, default: Any = _REQUIRED) -> tuple[str, ...]:
        """A list of non-empty strings (a single string is a list of one)."""
        value = self.take(key, (list, str), default)
        if value is None or value is default:
            return value
        items = [value] if isinstance(value, str) else value
        if not all(isinstance(item, str) and item.strip() for item in items):
            raise self.error(f"expected a list of non-empty strings, got {_shown(value)}", key)
        return tuple(items)

    def pattern(self, key: str, default: Any = _REQUIRED, flags: int = 0) -> re.Pattern | None:
        value = self.text(key, default)
        if value is None:
            return None
        try:
            return re.compile(value, flags)
        except re.error as error:
            raise self.error(f"regular expression {value!r} does not compile ({error})", key) from None

    def close(self) -> None:
        unknown = sorted(set(self.data) - self.taken)
        if unknown:
            raise self.error(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(self.taken))})")


def _shown(value: Any) -> str:
    kind = next((name for k, name in _TYPE_NAMES.items() if type(value) is k), type(value).__name__)
    text = repr(value)
    return f"{kind} {text[:60] + '…' if len(text) > 60 else text}"


class _Reader:
    """Reads one declaration into a `Domain`, checking names against the declared tools and sentences
    against the policy."""

    def __init__(self, origin: str, base: Path | None, policy: str | None) -> None:
        self.origin, self.base, self.policy = origin, base, policy

    def domain(self, data: Any) -> Domain:
        top = _Table(data, "", self.origin)
        name = top.text("name")
        policy_file = top.text("policy_file", None)
        if policy_file is not None and self.policy is None:
            self.policy = self._policy_text(top, policy_file)
        tools = _Table(top.take("tools", dict), "tools", self.origin)
        self.reads, self.writes = tools.names("read", ()), tools.names("write")
        tools.close()
        both = sorted(set(self.reads) & set(self.writes))
        if both:
            raise tools.error(f"{both[0]!r} is listed as both read and write")
        if TRANSFER in self.writes:
            raise tools.error(f"{TRANSFER!r} hands the conversation over: list it as a read, or not at all", "write")
        self.record_keys = top.names("record_keys", ())
        self.today = top.pattern("today", None)
        if self.today is not None and self.today.groups != 1:
            raise top.error("needs exactly one group, the date (YYYY-MM-DD)", "today")
        derived = top.names("derived", ())
        preconditions_always = top.take("preconditions_always", bool, False)
        workflow = top.take("workflow", bool, False)
        confirmation, confirmation_policy = self._confirmation(top.take("confirmation", dict, None))
        self.details = confirmation
        rules = top.take("rules", list, [])
        top.close()
        action_rules: list[ActionRule] = []
        conversation_rules: list[ConversationRule] = []
        transfer: tuple[Callable[[Conversation, int], bool], str] | None = None
        for position, entry in enumerate(rules):
            built = self._rule(_Table(entry, f"rules[{position}]", self.origin))
            if isinstance(built, ActionRule):
                action_rules.append(built)
            elif isinstance(built, ConversationRule):
                conversation_rules.append(built)
            elif transfer is not None:
                raise DeclarationError(f"{self.origin}: rules[{position}]: a second transfer_only_when rule")
            else:
                transfer = built
        extra = {"transfer_called_for": transfer[0], "transfer_policy": transfer[1]} if transfer else {}
        return Domain(
            name=name,
            writes=frozenset(self.writes),
            reads=frozenset(self.reads),
            record_keys=self.record_keys,
            confirmation=confirmation,
            confirmation_policy=confirmation_policy,
            action_rules=tuple(action_rules),
            conversation_rules=tuple(conversation_rules),
            derived=frozenset(derived),
            preconditions_always=preconditions_always,
            workflow=workflow,
            origin=self.origin,
            **extra,
        )

    def _policy_text(self, top: _Table, policy_file: str) -> str:
        path = Path(policy_file)
        path = path if path.is_absolute() or self.base is None else self.base / path
        try:
            return path.read_text(encoding="utf-8")
        except OSError as error:
            raise top.error(f"cannot read {path} ({error.strerror or error})", "policy_file") from None

    def sentence(self, table: _Table, key: str = "policy") -> str:
        """The policy sentence a rule implements, checked against the policy text when there is one."""
        sentence = table.text(key)
        if self.policy is not None and normal(sentence) not in normal(self.policy):
            raise table.error(f"{sentence!r} does not occur in the policy", key)
        return sentence

    def tool_names(self, table: _Table, key: str, among: tuple[str, ...], what: str) -> frozenset[str]:
        names = table.names(key)
        unknown = [n for n in names if n not in among]
        if unknown:
            raise table.error(f"{unknown[0]!r} is not a declared {what} tool (tools.{what})", key)
        return frozenset(names)

    def _confirmation(self, data: dict | None) -> tuple[Callable[[Call, Conversation], Any], str]:
        if data is None:
            return (lambda call, conversation: None), ""
        table = _Table(data, "confirmation", self.origin)
        policy = self.sentence(table)
        details_table = _Table(table.take("details", dict), "confirmation.details", self.origin)
        details: dict[str, tuple[tuple[str, ...], ...]] = {}
        for write in list(details_table.data):
            if write not in self.writes:
                raise details_table.error("not a declared write tool (tools.write)", write)
            details[write] = tuple(tuple(spec.split("|")) for spec in details_table.names(write))
        details_table.close()
        table.close()
        return _confirmation(details), policy

    def _conditions(self, table: _Table, key: str, subjects: tuple[str, ...], default: Any) -> tuple[Condition, ...]:
        entries = table.take(key, list, default)
        if entries is None:
            return ()
        if not entries and default is _REQUIRED:
            raise table.error("needs at least one condition", key)
        return tuple(
            self._condition(_Table(e, f"{table.where}.{key}[{i}]", self.origin), subjects)
            for i, e in enumerate(entries)
        )

    def _condition(self, table: _Table, subjects: tuple[str, ...]) -> Condition:
        present = [s for s in subjects if s in table.data]
        if len(present) != 1:
            raise table.error(f"needs exactly one of {' or '.join(subjects)}")
        subject = present[0]
        name = table.text(subject)
        tests = [t for t in TESTS if t in table.data]
        if len(tests) != 1:
            raise table.error(f"needs exactly one test of {', '.join(TESTS)}")
        test = tests[0]
        if test in ("in", "not_in"):
            value = table.take(test, list)
            if not value or any(isinstance(v, (list, dict)) for v in value):
                raise table.error("expected a non-empty list of values", test)
            value = tuple(value)
        elif test == "matches":
            value = table.pattern(test).pattern
        elif test == "within_days":
            value = table.take(test, int)
        elif test == "outside":
            value = table.take(test, list)
            if len(value) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
                raise table.error(f"expected [LOW, HIGH], two numbers, got {_shown(value)}", test)
            value = (value[0], value[1])
        else:
            value = table.text(test)
            if value.partition(".")[0] not in self.reads + self.writes:
                raise table.error(f"{value.partition('.')[0]!r} is not a declared tool", test)
        span_to = table.text("span_to", None)
        if span_to is not None and test != "outside":
            raise table.error("span_to goes with outside only", "span_to")
        table.close()
        return Condition(subject, name, test, value, span_to)

    def _rule(self, table: _Table) -> ActionRule | ConversationRule | tuple[Callable[[Conversation, int], bool], str]:
        kind = table.text("kind")
        if kind not in RULE_KINDS:
            raise table.error(f"unknown kind {kind!r} (known: {', '.join(RULE_KINDS)})", "kind")
        table.where = f"{table.where} ({kind})"
        policy = self.sentence(table)
        capability = table.text("capability", RULE_KINDS[kind][0])
        if capability not in CAPABILITIES:
            raise table.error(f"unknown capability {capability!r} (known: {', '.join(CAPABILITIES)})", "capability")
        built = getattr(self, f"_{kind}")(table, policy, capability)
        table.close()
        return built

    def _writes(self, table: _Table) -> frozenset[str]:
        return self.tool_names(table, "writes", self.writes, "write")

    def _read_before(self, table: _Table, policy: str, capability: str) -> ActionRule:
        writes = self._writes(table)
        reads = self.tool_names(table, "read", self.reads, "read")
        key = table.text("key")
        if key.count(".") > 1:
            raise table.error(f"expected ARG or ARG.FIELD, got {key!r}", "key")
        return make.read_before(policy, writes, reads, key, table.text("shows", None), capability)

    def _forbidden(self, table: _Table, policy: str, capability: str) -> ActionRule:
        writes = self._writes(table)
        record = table.text("record", None)
        subjects = ("field", "argument") if record is not None else ("argument",)
        when = self._conditions(table, "when", subjects, _REQUIRED)
        unless = self._conditions(table, "unless", subjects, None)
        return make.forbidden(policy, writes, record, when, unless, self.today, capability)

    def _argument_format(self, table: _Table, policy: str, capability: str) -> ActionRule:
        writes = self._writes(table)
        return make.argument_format(policy, writes, table.names("arguments"), table.pattern("pattern"), capability)

    def _argument_seen(self, table: _Table, policy: str, capability: str) -> ActionRule:
        writes = self._writes(table)
        where = table.text("seen_in", "tool_results")
        if where not in ("tool_results", "conversation"):
            raise table.error(f"expected 'tool_results' or 'conversation', got {where!r}", "seen_in")
        return make.argument_seen(policy, writes, table.names("arguments"), where == "conversation", capability)

    def _call_first(self, table: _Table, policy: str, capability: str) -> ConversationRule:
        tool = table.text("tool")
        if tool not in self.reads + self.writes:
            raise table.error(f"{tool!r} is not a declared tool", "tool")
        later = table.names("before", None)
        return make.call_first(policy, tool, frozenset(later) if later is not None else None, capability)

    def _never_say(self, table: _Table, policy: str, capability: str) -> ConversationRule:
        return make.never_say(policy, table.pattern("pattern", flags=re.IGNORECASE), capability)

    def _stated_amount(self, table: _Table, policy: str, capability: str) -> ConversationRule:
        writes = self._writes(table)
        says = table.pattern("says", flags=re.IGNORECASE)
        field = table.text("amount")
        change = table.take("change", bool, False)
        return make.stated_amount(policy, writes, says, field, change, self.record_keys, capability, self.details)

    def _transfer_only_when(
        self, table: _Table, policy: str, capability: str
    ) -> tuple[Callable[[Conversation, int], bool], str]:
        key = table.text("record")
        when = self._conditions(table, "when", ("field",), _REQUIRED)
        return make.transfer_only_when(policy, key, when), policy


def _confirmation(details: dict[str, tuple[tuple[str, ...], ...]]) -> Callable[[Call, Conversation], Any]:
    """`Domain.confirmation` from the declared details: per write, each detail's alternatives as the
    call gives them (an argument's value, or its items; ARG.FIELD: that field of the record ARG names)."""

    def confirmation(call: Call, conversation: Conversation) -> list[tuple[Any, ...]] | None:
        specs = details.get(call.name)
        if specs is None:
            return None
        found = []
        for alternatives in specs:
            words: list[Any] = []
            for spec in alternatives:
                argument, _, field = spec.partition(".")
                value = call.arguments.get(argument)
                if field:
                    record = (
                        conversation.record(argument, value, call.index, with_key=field) if value is not None else None
                    )
                    value = record.get(field) if record is not None else None
                words += value if isinstance(value, list) else [value] if value is not None else []
            if words:
                found.append(tuple(words))
        return found

    return confirmation


def read_declaration(text: str, origin: str, suffix: str) -> Any:
    """The mapping a TOML (`suffix` ".toml") or JSON file holds; DeclarationError naming `origin`
    where it does not parse."""
    try:
        return tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise DeclarationError(f"{origin}: not a valid {suffix.lstrip('.').upper()} file ({error})") from None


def declare(data: Any, origin: str, base: Path | None = None, policy: str | None = None) -> Domain:
    """The `Domain` a declaration mapping describes (see the module docstring); `origin` names it in
    errors and in `Domain.origin`, `base` is the folder `policy_file` is relative to, and `policy`
    (when given) the policy text each rule's sentence must occur in, instead of `policy_file`'s."""
    return _Reader(origin, base, policy).domain(data)


def load_declaration(path: str | Path, policy: str | None = None) -> Domain:
    """The `Domain` a TOML or JSON declaration file describes; DeclarationError naming the file and
    the key where it is malformed or unreadable."""
    path = Path(path)
    if path.suffix not in (".toml", ".json"):
        raise DeclarationError(f"{path}: a domain declaration is a .toml or .json file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise DeclarationError(f"{path}: cannot read the domain declaration ({error.strerror or error})") from None
    return declare(read_declaration(text, str(path), path.suffix), str(path), path.parent, policy)
