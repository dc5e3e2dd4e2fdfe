"""What a domain's rule module declares, and the generic stand-in for domains no module knows.

A rule module (airline, retail, telecom) builds one `Domain`: which tools write, which arguments
name the record a write changes, what an agent must have said before the user's "yes" counts as
confirming a write, the policy's rules over one write (applied to the agent's writes and to the
gold actions alike, so gold is checked against the policy instead of trusted), and rules over
what was said in the conversation. Each rule carries the policy sentence it implements and is
applied only when the run's policy text contains that sentence (or the run recorded no policy),
so a run under a different policy falls back to the generic checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tracegym.analysis.rules.conversation import Call, Conversation, normal

TRANSFER = "transfer_to_human_agents"
_WRITE_PREFIXES = (
    "book",
    "cancel",
    "update",
    "modify",
    "return",
    "exchange",
    "send",
    "create",
    "delete",
    "set",
    "add",
    "remove",
    "change",
    "suspend",
    "resume",
    "refuel",
    "enable",
    "disable",
    "toggle",
    "reset",
    "transfer",
    "move",
    "pay",
    "close",
    "open",
    "issue",
    "apply",
    "submit",
    "grant",
    "revoke",
    "refund",
    "purchase",
    "order",
    "schedule",
    "assign",
    "edit",
    "write",
    "post",
    "put",
    "insert",
)


@dataclass(frozen=True)
class Finding:
    """One reason a capability is LACKING: the message that shows it (None: the run as a whole) and why;
    `shows_need`: the finding shows the capability was needed even where the task's shape says it
    was not (a request never carried out, though it was the only one); `misled`: a misreading of the
    state shown that made the agent believe no work was left, so the steps it then left undone are
    owed to the misreading (counted once, under its capability); a transfer made before those
    steps is still one the policy does not call for. `transfers`: the rule broken sends the request
    to a human agent (an airline reservation with a flown flight: "the agent cannot help")."""

    capability: str
    index: int | None
    text: str
    shows_need: bool = False
    misled: bool = False
    transfers: bool = False


@dataclass(frozen=True)
class ActionRule:
    """A policy rule over one write: `check(conversation, name, arguments, before)` yields a finding
    (capability and why) for each way the write breaks the rule, given the state read before
    message `before`."""

    policy: str
    tools: frozenset[str]
    check: Callable[[Conversation, str, dict[str, Any], int], Iterable[Finding]]


@dataclass(frozen=True)
class ConversationRule:
    """A policy rule over what was said and read: `check(conversation)` yields findings."""

    policy: str
    check: Callable[[Conversation], Iterable[Finding]]


@dataclass(frozen=True)
class Domain:
    """A domain's executable policy. `confirmation(call, conversation)` lists what the agent must
    have named (each detail a tuple of alternatives) before the user's yes confirms the write, or
    None where the policy (`confirmation_policy`, a sentence of it) asks for no confirmation.
    `derived` names the write arguments computed from tool data
    (wrong values there are data-reasoning errors); `expand(conversation, value)` gives the words
    that describe an id (a retail item's options), so a choice the user dictated in words is
    recognised; `preconditions_always`: requests in this domain always involve a checked write or
    a refusal of one (airline, retail), or a fix or escalation that depends on the state (telecom,
    labels/telecom_precondition_amendment.md), so precondition verification is never NA; `workflow`: a
    request is a procedure of several steps on either side (telecom troubleshooting), so multi-step
    completion is needed wherever a step is; elsewhere it is needed only where the task involves two
    or more distinct writes (one request with at most one write needs none). `reads` names the tools
    that only read (a declared domain lists every tool as a read or a write);
    `transfer_called_for(conversation, before)` says whether the policy calls for a transfer to a
    human agent given what was read before message `before` (where it does, a transfer complies and
    a missing one does not); `origin` says where the domain was declared (a file, an entry point,
    "built-in")."""

    name: str
    writes: frozenset[str]
    record_keys: tuple[str, ...] = ()
    confirmation: Callable[[Call, Conversation], list[tuple[str, ...]] | None] = lambda call, conversation: None
    confirmation_policy: str = ""
    action_rules: tuple[ActionRule, ...] = ()
    conversation_rules: tuple[ConversationRule, ...] = ()
    derived: frozenset[str] = frozenset()
    expand: Callable[[Conversation, Any], list[Any]] = lambda conversation, value: []
    preconditions_always: bool = False
    workflow: bool = False
    reads: frozenset[str] = frozenset()
    transfer_called_for: Callable[[Conversation, int], bool] = lambda conversation, before: False
    transfer_policy: str = ""
    origin: str = "built-in"

    def is_write(self, name: str) -> bool:
        return name in self.writes

    def sentences(self) -> list[str]:
        """The policy sentences the domain's rules implement, each once, in declaration order."""
        rules = (*self.action_rules, *self.conversation_rules)
        found = [self.confirmation_policy, self.transfer_policy, *(rule.policy for rule in rules)]
        return list(dict.fromkeys(sentence for sentence in found if sentence))

    def applies(self, conversation: Conversation, policy: str) -> bool:
        """Whether the run's policy holds the sentence a rule implements (or no policy was recorded)."""
        return not conversation.policy or normal(policy) in conversation.policy

    def check_action(
        self, conversation: Conversation, name: str, arguments: dict[str, Any], before: int
    ) -> list[Finding]:
        """Every policy rule the write `name(arguments)` breaks, given what was read before `before`."""
        return [
            finding
            for rule in self.action_rules
            if name in rule.tools and self.applies(conversation, rule.policy)
            for finding in rule.check(conversation, name, arguments, before)
        ]

    def check_conversation(self, conversation: Conversation) -> Iterator[Finding]:
        for rule in self.conversation_rules:
            if self.applies(conversation, rule.policy):
                yield from rule.check(conversation)


class _GenericWrites(frozenset):
    """Tool names that look like writes (a state-changing verb first), for domains no module knows."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name != TRANSFER and name.split("_")[0] in _WRITE_PREFIXES


GENERIC = Domain(name="generic", writes=_GenericWrites())
