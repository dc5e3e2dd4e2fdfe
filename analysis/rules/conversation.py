"""What a τ-style conversation established, as the policy checks ask it: the calls made (by the agent
and, in telecom, by the user) joined to their parsed results, the records the tool outputs showed,
what the user said, and whether the user explicitly confirmed an action the agent proposed.

Message indices are those of `Trajectory.messages`, which for τ² Results files are the indices of
the simulation's `messages[]` (ingest keeps them one to one).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property, lru_cache
from typing import Any

import orjson

from tracegym.schema import Trajectory

STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
_AFFIRMATIVE = re.compile(
    r"\b(yes|yeah|yep|yup|sure|okay|ok|confirm(?:ed)?|go ahead|proceed|please do|do it|"
    r"that['’]?s (?:correct|right|fine)|"
    r"correct|sounds good|i agree|approve[sd]?|let['’]?s do|"
    r"please (?:cancel|return|exchange|modify|change|book|update|add|remove|process|make|send))\b",
    re.IGNORECASE,
)
_NEGATIVE_START = re.compile(r"^\s*(no\b|nope\b|not\b|don['’]?t\b|wait\b|actually\b,? no)", re.IGNORECASE)
_CLOSING = re.compile(
    r"anything else|further (?:assistance|questions)|have a (?:great|good|nice|wonderful) day|"
    r"feel free to (?:reach out|contact)|glad (?:i|we) could help|you['’]?re (?:very )?welcome|"
    r"being transferred|transfer(?:ring)? you to a human",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_CONDITIONAL = re.compile(
    r"\b(?:if(?! you(?:['’]d| would)? (?:like|wish|want|prefer))|whether|unless)\b|\?\s*$", re.IGNORECASE
)
_CLAUSE = re.compile(r"[,;:]|\b(?:but|despite|however|although|though|whereas)\b", re.IGNORECASE)
_NEGATED = re.compile(r"\b(?:not|never|no|cannot|unable)\b|n[o'’]t\b", re.IGNORECASE)
_NOW = re.compile(r"current time is (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
_WISH = re.compile(
    r"\b(?:i['’]?d like|i would like|i want|i['’]?ll take|i will take|i['’]?ll go with|let['’]?s go with|please)\b",
    re.IGNORECASE,
)
_ASKS = re.compile(r"\b(confirm|shall i|would you like|do you want|let me know|reply with)\b", re.IGNORECASE)


def parse_output(text: str) -> Any:
    """A tool result as JSON when it is JSON, else its text."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _token(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return " ".join(str(value).lower().split()).lstrip("#")


def mentions(text: str, value: Any) -> bool:
    """Whether `value` occurs in `text` as a whole token (case and kinds of space ignored; "#W1" and "W1" alike;
    a number may carry a unit, "2GB", or trailing zeros, "2.0", but is not found inside a longer number, 2 not in 2024
    or 2.5;
    a token that starts or ends with a symbol, "$" or "/gb", is matched there without a boundary)."""
    token = _token(value)
    flat = _flat(text)
    return bool(token) and token in flat and _token_pattern(token).search(flat) is not None


@lru_cache(maxsize=8192)
def _flat(text: str) -> str:
    """`text` lower-cased, "#" dropped, spacing collapsed (as `mentions` compares)."""
    return " ".join(text.lower().replace("#", "").split())


@lru_cache(maxsize=8192)
def _token_pattern(token: str) -> re.Pattern:
    before = r"(?<![\w.])" if re.match(r"\w", token) else ""
    after = (
        r"(?:\.0+)?(?!\d|\.\d)"
        if re.fullmatch(r"\d+", token)
        else r"(?!\d|\.\d)"
        if re.fullmatch(r"\d+\.\d+", token)
        else r"(?!\w)"
        if re.search(r"\w$", token)
        else ""
    )
    return re.compile(before + re.escape(token) + after)


@lru_cache(maxsize=1024)
def normal(text: str) -> str:
    """`text` lower-cased with markdown emphasis dropped and spacing collapsed, for finding a sentence."""
    return " ".join(re.sub(r"[*_`#]", "", text).lower().split())


def is_closing(text: str) -> bool:
    """A sign-off ("Is there anything else I can help you with?") rather than a question awaiting an answer."""
    return bool(_CLOSING.search(text)) and not re.search(
        r"\b(confirm|proceed|shall i|would you like me to)\b", text, re.IGNORECASE
    )


def awaits_answer(text: str) -> bool:
    """An agent message that asks the user something (a question or a request to confirm), not a sign-off."""
    return not is_closing(text) and ("?" in text or bool(_ASKS.search(text)))


def is_affirmative(text: str) -> bool:
    """An explicit yes, or the request restated as one ("please cancel it"), in a message not opening with a no."""
    return bool(_AFFIRMATIVE.search(text)) and not _NEGATIVE_START.search(text)


def sentences(text: str) -> list[str]:
    """The sentences of `text` (split at . ! ? and line breaks), stripped, empty ones dropped."""
    return [sentence.strip() for sentence in _SENTENCE.findall(text) if sentence.strip()]


def assertions(text: str, hedges: re.Pattern | None = None) -> list[str]:
    """The clauses of `text` that assert something: from sentences that are no question, no
    condition ("if", "unless", ...) and match none of the caller's `hedges`, the clauses (split at
    commas, "but", "despite", ...) that are not negated."""
    return [
        clause.strip()
        for sentence in sentences(text)
        if not _CONDITIONAL.search(sentence) and not (hedges and hedges.search(sentence))
        for clause in _CLAUSE.split(sentence)
        if clause.strip() and not negated(clause)
    ]


def negated(text: str) -> bool:
    """Whether `text` holds a negation ("not", "never", "cannot", "unable", "n't")."""
    return bool(_NEGATED.search(text))


def listed(value: Any) -> list:
    """`value` if it is a JSON list, else [] (a record field read from a tool output may be anything)."""
    return value if isinstance(value, list) else []


def dicts(value: Any) -> list[dict]:
    """The objects in a JSON list field (flights, passengers, payments); [] for anything else."""
    return [item for item in listed(value) if isinstance(item, dict)]


def gold_action(value: Any) -> dict[str, Any] | None:
    """A gold action as the checks read it (None when `value` is none): a dict with a str `name`,
    dict `arguments` and `compare_args` a list of str or None; a hostile field is dropped."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments, keys = value.get("arguments"), value.get("compare_args")
    return {
        **value,
        "arguments": arguments if isinstance(arguments, dict) else {},
        "compare_args": keys if isinstance(keys, list) and all(isinstance(k, str) for k in keys) else None,
    }


@dataclass(frozen=True)
class Call:
    """A tool call, the message holding it, who made it, and its result (parsed) and error flag."""

    index: int
    name: str
    arguments: dict[str, Any]
    requestor: str
    result_index: int | None
    output: Any
    error: bool


class Conversation:
    """Queries over one trajectory's messages; built once per trajectory."""

    def __init__(self, trajectory: Trajectory) -> None:
        self.trajectory = trajectory
        self.messages = trajectory.messages
        self.last = len(self.messages) - 1
        self.prior: tuple[dict[str, Any], ...] = ()

    def after(self, actions: list[dict[str, Any]]) -> Conversation:
        """This conversation with `actions` (the gold actions before the one being checked) taken as
        done; rule modules read records through them (a gold cabin change, then a gold cancellation)."""
        _ = self._index  # computed once, shared by the views
        view = copy.copy(self)
        view.prior = tuple(actions)
        return view

    @cached_property
    def policy(self) -> str:
        """The run's policy text, lower-cased, markup dropped, spacing collapsed ("" when none was recorded)."""
        return normal(str(self.trajectory.metadata.get("policy") or ""))

    @cached_property
    def now(self) -> datetime | None:
        """The policy's "The current time is YYYY-MM-DD HH:MM:SS" (None when it states none)."""
        found = _NOW.search(str(self.trajectory.metadata.get("policy") or ""))
        try:
            return datetime.fromisoformat(found.group(1)) if found else None
        except ValueError:  # a date the calendar does not have
            return None

    @cached_property
    def gold(self) -> list[dict[str, Any]]:
        """The task's gold actions (`gold_action`), in order; [] when none were recorded."""
        actions = self.trajectory.diagnostics.get("gold_actions")
        return [a for a in map(gold_action, actions if isinstance(actions, list) else []) if a is not None]

    @cached_property
    def action_checks(self) -> list[tuple[dict[str, Any], bool]]:
        """τ²'s own verdict per gold action (action, matched), when the run recorded one; else []."""
        info = self.trajectory.diagnostics.get("reward_info")
        checks = info.get("action_checks") if isinstance(info, dict) else None
        return [
            (action, bool(c.get("action_match")))
            for c in (checks if isinstance(checks, list) else [])
            if isinstance(c, dict) and (action := gold_action(c.get("action"))) is not None
        ]

    @cached_property
    def calls(self) -> list[Call]:
        """Every tool call in order, joined to the tool message answering it."""
        results: dict[str, int] = {}
        for index, message in enumerate(self.messages):
            if message.role == "tool" and message.tool_call_id:
                results.setdefault(message.tool_call_id, index)
        calls = []
        for index, message in enumerate(self.messages):
            for call in message.tool_calls:
                at = results.get(call.id) if call.id else None
                result = self.messages[at] if at is not None else None
                calls.append(
                    Call(
                        index,
                        call.name,
                        call.arguments,
                        message.role,
                        at,
                        parse_output(result.content) if result else None,
                        bool(result and result.error),
                    )
                )
        return calls

    @cached_property
    def agent_calls(self) -> list[Call]:
        return [c for c in self.calls if c.requestor == "assistant"]

    def texts(self, role: str, start: int = 0, stop: int | None = None) -> list[tuple[int, str]]:
        """(index, text) of the non-empty messages of `role` in [start, stop)."""
        stop = len(self.messages) if stop is None else stop
        return [
            (i, self.messages[i].content)
            for i in range(max(start, 0), min(stop, len(self.messages)))
            if self.messages[i].role == role and self.messages[i].content.strip()
        ]

    def user_text(self, stop: int | None = None) -> str:
        return "\n".join(text for _, text in self.texts("user", 0, stop))

    def said_by_user(self, value: Any, stop: int | None = None) -> bool:
        """Whether the user stated `value` before message `stop`."""
        return mentions(self.user_text(stop), value)

    def user_named_first(self, value: Any, stop: int | None = None) -> bool:
        """Whether the user stated `value` before message `stop`, and before any agent message did (a
        value the user only repeats from the agent's offer is the agent's choice)."""
        for message in self.messages[:stop]:
            if message.role in ("user", "assistant") and message.content and mentions(message.content, value):
                return message.role == "user"
        return False

    @cached_property
    def _outputs(self) -> list[tuple[int, Any]]:
        return [(c.result_index, c.output) for c in self.calls if c.result_index is not None and not c.error]

    @cached_property
    def _index(self) -> tuple[dict[str, list[tuple[int, dict]]], dict[str, list[tuple[int, str]]]]:
        """One walk over the tool results: ({key: (result index, object) for every object holding that
        key, outermost first, in order}, {token of a scalar: (result index, the key it sits under; a
        list's items sit under the list's key), in order})."""
        by_key: dict[str, list[tuple[int, dict]]] = {}
        under: dict[str, list[tuple[int, str]]] = {}
        for at, output in self._outputs:
            stack: list[tuple[str, Any]] = [("", output)]
            while stack:
                key, value = stack.pop()
                if isinstance(value, dict):
                    for name in value:
                        by_key.setdefault(name, []).append((at, value))
                    stack.extend(reversed(value.items()))
                elif isinstance(value, list):
                    stack.extend((key, item) for item in reversed(value))
                elif value is not None:
                    under.setdefault(_token(value), []).append((at, key))
        return by_key, under

    @property
    def _by_key(self) -> dict[str, list[tuple[int, dict]]]:
        return self._index[0]

    @property
    def _under(self) -> dict[str, list[tuple[int, str]]]:
        return self._index[1]

    def keys_holding(self, value: Any, stop: int | None = None) -> set[str]:
        """The keys `value` sits under in the tool results before message `stop` ("" at top level)."""
        return {key for at, key in self._under.get(_token(value), ()) if stop is None or at < stop}

    def seen_in_outputs(self, value: Any, stop: int | None = None) -> bool:
        """Whether `value` occurs in a tool result before message `stop`."""
        found = self._under.get(_token(value))
        return bool(_token(value)) and bool(found) and (stop is None or found[0][0] < stop)

    def seen(self, value: Any, stop: int) -> bool:
        """Whether `value` occurs anywhere in the conversation before message `stop`."""
        return self.seen_in_outputs(value, stop) or any(mentions(m.content, value) for m in self.messages[:stop])

    def records(self, key: str, stop: int | None = None) -> list[tuple[int, dict]]:
        """(result index, object) for every object holding `key` in the tool results before `stop`."""
        return [(at, obj) for at, obj in self._by_key.get(key, ()) if stop is None or at < stop]

    def record(
        self, key: str, value: Any, stop: int | None = None, first: bool = False, with_key: str | None = None
    ) -> dict | None:
        """The record whose `key` is `value` (and that holds `with_key`, when given) read before
        `stop`: the latest, or with `first` the earliest (the state before the agent changed it)."""
        token = _token(value)
        found = [
            obj
            for _, obj in self.records(key, stop)
            if _token(obj.get(key)) == token and (with_key is None or with_key in obj)
        ]
        return (found[0] if first else found[-1]) if found else None

    def confirmed(self, index: int, details: list[tuple[str, ...]]) -> tuple[int, int] | None:
        """(proposal index, answer index) when an agent message before `index` names details of the
        write (each a tuple of alternatives) and the user's next message, before `index`, agrees:
        with an explicit yes where the proposal named them all, or with a wish ("I'd like", "please")
        whose clause, not negated and in no question, names the details itself, those the proposal
        left to the user's choice included ("$2 per GB; how much?" answered "2 GB, please": choosing
        with the terms in view is agreeing to them); None otherwise."""

        def named(text: str, detail: tuple[str, ...]) -> bool:
            return any(mentions(text, alternative) for alternative in detail)

        def chooses(answer: str, left_open: list[tuple[str, ...]]) -> bool:
            if _NEGATIVE_START.search(answer):
                return False
            wishes = [
                clause
                for sentence in sentences(answer)
                if not sentence.endswith("?") and _WISH.search(sentence)
                for clause in _CLAUSE.split(sentence)
                if not negated(clause)
            ]
            return any(
                any(named(clause, detail) for detail in details) and all(named(clause, detail) for detail in left_open)
                for clause in wishes
            )

        for proposal, text in reversed(self.texts("assistant", 0, index)):
            answers = self.texts("user", proposal + 1, index)
            left_open = [detail for detail in details if not named(text, detail)]
            if not answers or (details and len(left_open) == len(details)):  # a proposal names some detail of the write
                continue
            answer = answers[0][1]
            if (not left_open and is_affirmative(answer)) or chooses(answer, left_open):
                return proposal, answers[0][0]
        return None
