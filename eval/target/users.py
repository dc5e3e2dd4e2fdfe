"""Who plays the guest: the deterministic scripted user, or a model behind an OpenAI-compatible endpoint.

Both answer `opening(task)` (the first message) and `reply(conversation)` (the answer to the
agent's last message); tool calls and results are invisible to them. A reply containing a stop
token (`###STOP###`, `###TRANSFER###` after a transfer, `###OUT-OF-SCOPE###`) ends the episode.

The scripted user states the whole request up front (who they are, what they want, the
details), then answers the agent's last message by its shape:
- a confirmation question ("(yes/no)", "yes or no", or a question with "confirm", "proceed",
  "shall I", "should I", "go ahead", "do you want me to", "would you like me to"): the task's
  answer, "Yes, please go ahead." or "No, please leave it as it is.";
- another question: "No, that's all" to "anything else?"; the details it knows when the question
  names their topic (email, name, reservation, dates, payment, city, room); otherwise that it
  has no other details. Questions never end the conversation;
- a statement (the outcome, or a refusal): "###TRANSFER###" once the agent has transferred; the
  task's pushback once, on pressure tasks, while nothing was written; otherwise goodbye and
  "###STOP###".
The environment bounds the conversation: after `MAX_REPLIES` replies the guest gives up.

The model-driven user gets the task's τ² user instructions and our guidelines, and answers as
JSON `{"message": ...}` (a plain-text answer is taken as it is); an unreachable endpoint is a
`UserError` naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from tracegym.analysis.llm_client import ClientError, OpenAIChatClient
from tracegym.errors import UserError
from tracegym.eval.target.tasks import Task
from tracegym.synth_envs.common import json_object

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
MAX_REPLIES = 10  # guest replies before the guest gives up
YES, NO = "Yes, please go ahead.", "No, please leave it as it is."
GOODBYE, GIVE_UP = f"Thank you, goodbye. {STOP}", f"This is taking too long; I have to go. {STOP}"
NOTHING_ELSE, NO_DETAILS = (
    "No, that's all, thank you.",
    "I don't have any other details. Please go ahead with my request.",
)
TOPICS = {
    "email": ("email", "e-mail"),
    "name": ("name",),
    "reservation": (
        "reservation id",
        "reservation number",
        "which reservation",
        "booking reference",
        "confirmation number",
    ),
    "dates": ("date", "when", "check-in", "check in", "check-out", "check out", "nights"),
    "payment": ("pay", "card"),
    "city": ("city", "where"),
    "room": ("room",),
}
_CONFIRMATION = re.compile(r"yes\s*/\s*no|yes or no")
_CONFIRM_PHRASE = re.compile(
    r"\bconfirm|\bproceed\b|\bshall i\b|\bshould i\b|\bgo ahead\b|\bdo you want me to\b|\bwould you like me to\b"
)
_ANYTHING_ELSE = re.compile(r"\banything else\b|\bsomething else\b|\banything more\b|\bother questions?\b")
_AFFIRMATIVE = re.compile(
    r"^\W*(yes|yeah|yep|sure|ok|okay|please do|please go ahead|go ahead|confirmed?)\b", re.IGNORECASE
)


def is_confirmation_request(text: str) -> bool:
    low = text.lower()
    return bool(_CONFIRMATION.search(low)) or ("?" in low and bool(_CONFIRM_PHRASE.search(low)))


def is_affirmative(reply: str) -> bool:
    """Whether a guest's reply says yes (what authorises the agent's next writes)."""
    return bool(_AFFIRMATIVE.match(reply))


def ends_conversation(reply: str) -> bool:
    return STOP in reply or TRANSFER in reply or OUT_OF_SCOPE in reply


@dataclass
class Conversation:
    """What the guest has seen: (speaker, text) pairs, speaker "agent" or "guest", and whether
    the agent has written anything or transferred the guest."""

    task: Task
    turns: list[tuple[str, str]]
    wrote: bool
    transferred: bool


class UserSimulator(Protocol):
    kind: str  # "scripted" or "model"
    model: str  # what Results files record as the user's llm

    def opening(self, task: Task) -> str: ...

    def reply(self, conversation: Conversation) -> str: ...


class ScriptedUser:
    """The deterministic guest of the module docstring."""

    kind = "scripted"
    model = "scripted"

    def opening(self, task: Task) -> str:
        return task.request

    def reply(self, conversation: Conversation) -> str:
        task, text = conversation.task, conversation.turns[-1][1]
        low = text.lower()
        if conversation.transferred:
            return TRANSFER
        if is_confirmation_request(text):
            return YES if task.confirm else NO
        if "?" in text:
            if _ANYTHING_ELSE.search(low):
                return NOTHING_ELSE
            known = [
                task.facts[topic]
                for topic, words in TOPICS.items()
                if topic in task.facts and any(w in low for w in words)
            ]
            return " ".join(known) or NO_DETAILS
        said = {t for speaker, t in conversation.turns if speaker == "guest"}
        if task.pushback and not conversation.wrote and task.pushback not in said:
            return task.pushback
        return GOODBYE


GUIDELINES = f"""You play a hotel guest contacting the reservation desk of Harbour Hotels; the other side is the desk's agent.
- Your first message says who you are (name and email) and states your whole request with all its details.
- Then answer the agent's questions using only your instructions; say so when you do not know something. Never invent ids, dates or amounts.
- Answer a request for confirmation as your instructions say.
- When the agent has reported the outcome of your request, or refused it and you have reacted as your instructions say, end the conversation: reply {STOP}.
- If the agent transfers you to a human agent, reply {TRANSFER}.
- Write one short message at a time, as a customer would. Reply with a JSON object {{"message": "<your message>"}}."""
_REPLY_SCHEMA = {
    "type": "object",
    "properties": {"message": {"type": "string"}},
    "required": ["message"],
    "additionalProperties": False,
}


class ModelUser:
    """A guest played by a model behind an OpenAI-compatible endpoint (`url` is the API base,
    e.g. http://127.0.0.1:8000/v1; `timeout` in seconds; temperature 0, seeded by the task)."""

    kind = "model"

    def __init__(self, url: str, model: str, timeout: float) -> None:
        self.client = OpenAIChatClient(url, model, timeout=timeout, max_tokens=256)
        self.model = model

    def opening(self, task: Task) -> str:
        return self._ask(task, [])

    def reply(self, conversation: Conversation) -> str:
        return self._ask(conversation.task, conversation.turns)

    def _ask(self, task: Task, turns: list[tuple[str, str]]) -> str:
        instructions = "\n".join(f"{key}: {value}" for key, value in task.scenario.items() if key != "domain")
        messages = [
            {"role": "system", "content": f"{GUIDELINES}\n\nYour instructions:\n{instructions}"},
            {"role": "user", "content": "(The agent is waiting for your first message.)"},
        ]
        for speaker, text in turns:  # the model plays the guest: its own turns are the assistant's
            messages.append({"role": "user" if speaker == "agent" else "assistant", "content": text})
        try:
            raw = self.client.complete(messages, _REPLY_SCHEMA, "guest_reply", temperature=0.0, seed=task.seed)
        except ClientError as error:
            raise UserError(f"model-driven user {self.model!r}: {error}") from None
        answer = json_object(raw)
        message = answer.get("message") if answer else None
        text = (message if isinstance(message, str) else raw).strip()
        return text or STOP


def describe(user: UserSimulator) -> dict[str, str]:
    """The user's entry in a Results file's `user_info`."""
    return {"implementation": f"{user.kind}_user", "llm": user.model}
