"""Procedures the agent invents: a τ agent acts only through its tools, within the conversation, and
the τ² policies forbid "information, knowledge or procedures not provided by the user or the
tools". Promising or offering to act later, outside the conversation (a reminder, a notification,
a follow-up, monitoring, a call back, a note on the account) is a procedure no tool provides:
policy compliance. Refusals ("I'm not able to add notes") and the system's own messages ("you
will receive an email") promise nothing.
"""

from __future__ import annotations

import re
from typing import Iterator

from tracegym.analysis.policy.conversation import Conversation, negated
from tracegym.analysis.policy.domain import ConversationRule, Finding

POLICY = "procedures not provided by the user or"  # the sentence's part all three τ² policies share
_AGENT = r"\b(?:I(?:'ll| will| can| could| would| am going to)|we(?:'ll| will| can| could)|(?:would|do) you (?:like|want) me to|shall I|let me)\b"
_LATER = (r"remind(?:er)?s?|set (?:up )?(?:a |an )?(?:reminder|alert)|(?:notify|alert) you (?:if|when|once|as soon as|of any)|"
          r"follow[- ]?up|keep (?:monitoring|an eye|track)|monitor|get back to you|call you(?: back)?|text you|contact you|"
          r"reach out to you|(?:add|put|leave|place|make) (?:a |an )?(?:internal )?note")
_PROMISE = re.compile(rf"{_AGENT}(?P<between>[^.?!\n]{{0,60}}?)\b(?P<act>{_LATER})\b", re.IGNORECASE)


def promised_later(conversation: Conversation) -> Iterator[Finding]:
    """The first agent sentence that promises or offers an action outside the conversation."""
    for index, text in conversation.texts("assistant"):
        for found in _PROMISE.finditer(text):
            if not negated(found.group(0)):
                yield Finding("policy_compliance", index, f"promises a procedure no tool provides ({found.group('act')}): "
                                                          f"{found.group(0)!r}")
                return


RULE = ConversationRule(POLICY, promised_later)
