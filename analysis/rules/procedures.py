"""Procedures the agent invents: a τ agent acts only through its tools, within the conversation, and
the τ² policies forbid "information, knowledge or procedures not provided by the user or the
tools". Promising or offering to act later, outside the conversation (a reminder, a notification,
a follow-up, monitoring, a call back, a note on the account, an e-mailed confirmation) is a
procedure no tool provides: policy compliance. Refusals ("I'm not able to add notes") and the
system's own messages ("you will receive an email") promise nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tracegym.analysis.rules.conversation import Conversation, negated
from tracegym.analysis.rules.domain import ConversationRule, Finding

POLICY = "procedures not provided by the user or"  # the sentence's part all three τ² policies share
_AGENT = re.compile(
    r"\b(?:I(?:['’]ll| will| can| could| would| am going to)|we(?:['’]ll| will| can| could)|"
    r"(?:would|do|if) you(?:['’]d)? "
    r"(?:like|want) me to|shall I|let me)\b",
    re.IGNORECASE,
)
_LATER = re.compile(
    r"\b(?:remind(?:er)?s?|set (?:up )?(?:a |an )?(?:reminder|alert)|"
    r"(?:notify|alert) you (?:if|when|once|as soon as|of any)|"
    r"follow[- ]?up|keep (?:monitoring|an eye|track)|monitor|get back to you|call you(?: back)?|text you|contact you|"
    r"reach out to you|(?:add|put|leave|place|make) (?:a |an )?(?:internal )?note|"
    r"(?:send|e-?mail) (?:you )?(?:an? )?(?:e-?mail(?:ed)? )?(?:confirmations?|receipts?|e-?mails?))\b",
    re.IGNORECASE,
)
_WORDS = re.compile(
    "remind|alert|notify|follow.?up|monitor|keep an eye|keep track|get back|call you|text you|contact you|"
    "reach out| note|send|mail"
)  # on lower-cased text, every match of _LATER holds one: a cheap first pass
REACH = 60  # characters an offer's "I will" / "would you like me to" may stand before the act it offers


def promised_later(conversation: Conversation) -> Iterator[Finding]:
    """The first agent sentence that promises or offers an action outside the conversation: the act,
    and before it in the same sentence, within REACH characters, the agent's "I will", "I can",
    "would you like me to" ..., with no negation between."""
    for index, text in conversation.texts("assistant"):
        for act in _LATER.finditer(text) if _WORDS.search(text.lower()) else ():
            before = re.split(r"[.?!\n]", text[max(0, act.start() - REACH) : act.start()])[-1]
            offers = list(_AGENT.finditer(before))
            promise = before[offers[-1].start() :] + act.group(0) if offers else ""
            if promise and not negated(promise):
                yield Finding(
                    "policy_compliance", index, f"promises a procedure no tool provides ({act.group(0)}): {promise!r}"
                )
                return


RULE = ConversationRule(POLICY, promised_later)
