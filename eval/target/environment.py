"""`TargetEnvironment`: the hotel desk as an environment of `tracegym.environment`'s protocol.

`reset(seed)` starts the task of `seed` (see `tasks`) and returns the guest's first message;
`step(text)` applies one assistant turn:
- tool calls (the Hermes format of `tracegym.toolcalls`) run against the database as this
  episode has changed it (`database.Changes`) and are answered in a `<tool_response>`; malformed
  calls, unknown tools and bad arguments are error observations counted in `errors`;
- plain text is a message to the guest, and the observation is the guest's reply (a plain user
  message). The episode terminates when the guest ends the conversation (a stop token; reward
  computed then) and is truncated after `max_turns` assistant turns, or with `turn_slack` after
  its oracle's turns plus that slack (`turn_limit`; graded as it stands).
`StepResult.info["reward_breakdown"]` holds the τ² `reward_info` of `grading.grade` at the end.

It reuses the families' base class (`tracegym.synth_envs.base.Environment`) for tool dispatch,
the system prompt cache and the oracle twin: `oracle(seed)`, `wrong_trajectories(seed)`,
`hint(seed)` and `gold_answer(seed)` (the oracle's last message) always play against the
scripted user. Every task is verified on its first reset: the oracle earns 1.0 and each wrong
trajectory and slip (`Task.slips`) that fits in the turn limit less, or reset raises (tasks are
never regenerated); so it does for a task whose oracle needs more than `max_turns` turns.
`record()` returns the finished episode as an `EpisodeRecord`: the conversation as τ² records
it (the guest's messages, the agent's messages and tool calls, the tool results with their error
flags) and the verdict.

Build one with `make_target(config)`, which plugs in the user the config asks for;
`TargetEnvironment(config)` alone always has the scripted user.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tracegym.environment import StepResult
from tracegym.eval.target.config import TargetConfig
from tracegym.eval.target.database import Changes, database
from tracegym.eval.target.grading import grade
from tracegym.eval.target.handbook import CLOSING, HANDBOOK, WRITE_TOOLS
from tracegym.eval.target.kinds import make_task
from tracegym.eval.target.tasks import Task
from tracegym.eval.target.tools import DeskTools, Ledger
from tracegym.eval.target.users import (
    GIVE_UP,
    MAX_REPLIES,
    Conversation,
    ModelUser,
    ScriptedUser,
    UserSimulator,
    ends_conversation,
    is_affirmative,
)
from tracegym.schema import Message, ToolCall
from tracegym.synth_envs.base import Environment
from tracegym.synth_envs.cache import BoundedCache
from tracegym.toolcalls import ParsedTurn, parse_tool_calls, render_tool_call, tools_system_prompt

INVALID_CALL = "invalid_tool_call"  # how a call the parser could not read is recorded in the transcript


@dataclass
class EpisodeRecord:
    """A finished episode: the task, the conversation as τ² records it (`messages`), the verdict,
    how it ended ("user_stop" or "max_steps"), the trial number, and, when it was played from
    scripted turns, the policy's view of it (`chat`: system prompt, raw turns, observations)."""

    task: Task
    messages: list[Message]
    reward: float
    reward_info: dict[str, Any]
    termination_reason: str
    trial: int = 0
    chat: list[Message] = field(default_factory=list)


@dataclass
class _Episode:
    """The mutable state of one episode."""

    changes: Changes = field(default_factory=Changes)
    transcript: list[Message] = field(default_factory=list)
    conversation: list[tuple[str, str]] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # the agent's messages to the guest
    authorised: bool = False  # the guest's last reply was a yes and the agent has not spoken since
    unconfirmed: list[str] = field(default_factory=list)
    writes: int = 0
    termination: str | None = None
    reward_info: dict[str, Any] | None = None


class TargetEnvironment(DeskTools, Environment):
    """The hotel reservation desk (see the module docstring and `tracegym.eval.target`)."""

    name = "hotel_desk"
    capability = "target"  # a target environment exercises several capabilities (see `kinds`)
    description = "A τ²-style hotel reservation desk: a generated database, 11 tools, a written policy, a guest."
    Config = TargetConfig
    instructions = HANDBOOK
    max_attempts = 1  # a task that fails its oracle checks is a bug: raise, never regenerate
    golds: ClassVar[BoundedCache[Changes]] = BoundedCache(1024)  # (key, seed) -> the gold changes
    state: _Episode
    world: Task

    def __init__(self, config: TargetConfig | None = None, user: UserSimulator | None = None) -> None:
        super().__init__(config if config is not None else TargetConfig())
        self.max_turns = self.config.max_turns
        self.user: UserSimulator = user if user is not None else ScriptedUser()
        self.db = database(self.config.domain_seed)

    @property
    def changes(self) -> Changes:
        return self.state.changes

    @property
    def system_prompt(self) -> str:
        return self.prompts.get(
            self.key,
            lambda: tools_system_prompt(
                self.instructions, self.tools, CLOSING, compact=self.config.prompt == "compact"
            ),
        )

    def task(self, seed: int) -> Task:
        """The task of `seed` (without starting an episode)."""
        return self.worlds.get((self.key, seed), self._generate, seed)

    # -- the family hooks ----------------------------------------------------------------------

    def _generate(self, seed: int) -> Task:
        return make_task(self.db, seed, self.config.train_tasks)

    def _new_state(self) -> _Episode:
        return _Episode()

    def _task(self) -> str:
        self.max_turns = self.turn_limit(self.world)
        opening = self.user.opening(self.world)
        self.state.conversation.append(("guest", opening))
        self.state.transcript.append(Message(role="user", content=opening))
        return opening

    def _reject(self) -> str | None:
        """A task whose oracle cannot finish within `max_turns` (a setting too small for it)."""
        if len(self.world.oracle) > self.config.max_turns:
            needed = len(self.world.oracle)
            return f"task {self.world.id} needs {needed} turns, more than max_turns {self.config.max_turns}"
        return None

    def turn_limit(self, task: Task) -> int:
        """Assistant turns an episode of `task` gets: its oracle's turns plus `turn_slack`, at most
        `max_turns` (`max_turns` when `turn_slack` is None)."""
        slack = self.config.turn_slack
        return self.config.max_turns if slack is None else min(self.config.max_turns, len(task.oracle) + slack)

    def _oracle(self) -> list[str]:
        return list(self.world.oracle)

    def _wrong(self) -> list[list[str]]:
        """The task's wrong trajectories, then its slips not among them, each that fits in the
        episode's turn limit (a longer one would be graded cut short, not as written)."""
        scripted = list(dict.fromkeys([*self.world.wrong, *self.world.slips.values()]))
        return [list(turns) for turns in scripted if len(turns) <= self.turn_limit(self.world)]

    def _hint(self) -> str:
        return self.world.hint

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        st = self.state
        gold = self.golds.get((self.key, self.generator_seed), self._gold)
        st.reward_info = grade(self.world, self.db, st.changes, gold, self.calls, st.said, st.unconfirmed)
        return st.reward_info["reward"], st.reward_info

    def _gold(self) -> Changes:
        ledger = Ledger(self.db)
        for action in self.world.actions:
            if action.name in WRITE_TOOLS or action.name == "transfer_to_human_agents":
                ledger.apply(action.name, action.arguments)
        return ledger.changes

    # -- episodes ------------------------------------------------------------------------------

    def step(self, action: str) -> StepResult:
        """Apply one assistant turn: tool calls are answered (by the base class, through `_answer`),
        plain text goes to the guest."""
        if self.seed is None or self.ended:
            return super().step(action)  # raises: no episode in progress
        turn = parse_tool_calls(action)
        if not turn.is_final_answer:
            self._record_calls(turn)
            return super().step(action)
        self.turns += 1
        observation = self._tell(turn.text)
        if self.state.termination is None and self.turns < self.max_turns:
            return StepResult(observation, 0.0, False, False, {"errors": self.errors, "turns": self.turns})
        return self._finish("", observation, truncated=self.state.termination is None)

    def _record_calls(self, turn: ParsedTurn) -> None:
        """Record the turn's calls, each with an id unique in the episode, and the errors that
        answer its unreadable ones (the base class answers those first, without `_answer`)."""
        number = self.turns + 1
        invalid = [
            ToolCall(id=f"turn{number}_invalid_{i}", name=INVALID_CALL, arguments={"raw": e.raw})
            for i, e in enumerate(turn.errors)
        ]
        calls = [ToolCall(id=f"turn{number}_{c.id}", name=c.name, arguments=c.arguments) for c in turn.calls]
        self.state.transcript.append(Message(role="assistant", content=turn.text, tool_calls=invalid + calls))
        for call, error in zip(invalid, turn.errors):
            self.state.transcript.append(
                Message(role="tool", content=f"error: {error.reason}", tool_call_id=call.id, error=True)
            )

    def _answer(self, call: ToolCall) -> str:
        """Answer one call (base class), recording its result and whether a write had the guest's yes."""
        st = self.state
        call = ToolCall(id=f"turn{self.turns}_{call.id}", name=call.name, arguments=call.arguments)
        errors = self.errors
        text = super()._answer(call)
        failed = self.errors > errors
        if not failed and call.name in WRITE_TOOLS:
            st.writes += 1
            if not st.authorised:
                st.unconfirmed.append(render_tool_call(call.name, call.arguments))
        st.transcript.append(Message(role="tool", content=text, tool_call_id=call.id, error=failed))
        return text

    def _finish(self, final_answer: str, observation: str, truncated: bool) -> StepResult:
        if truncated:
            self.state.termination = "max_steps"
        return super()._finish(final_answer, observation, truncated)

    def _tell(self, text: str) -> str:
        """Send a message to the guest; their reply."""
        st = self.state
        st.authorised = False
        st.said.append(text)
        st.conversation.append(("agent", text))
        st.transcript.append(Message(role="assistant", content=text))
        replies = sum(speaker == "guest" for speaker, _ in st.conversation) - 1
        if replies >= MAX_REPLIES:
            reply = GIVE_UP
        else:
            reply = self.user.reply(
                Conversation(self.world, st.conversation, st.writes > 0, bool(st.changes.transfers))
            )
        st.conversation.append(("guest", reply))
        st.transcript.append(Message(role="user", content=reply))
        st.authorised = is_affirmative(reply)
        if ends_conversation(reply):
            st.termination = "user_stop"
        return reply

    def cut(self) -> None:
        """End the episode in progress from outside (the agent's turn hit its token budget):
        graded as it stands and recorded as "max_steps", as a truncation is."""
        if self.seed is None or self.ended:
            raise RuntimeError(f"{self.name}: no episode in progress to cut")
        self._finish("", "", truncated=True)

    def record(self, trial: int = 0) -> EpisodeRecord:
        """The finished episode (RuntimeError while it is still going)."""
        st = self.state
        if not self.ended or st.reward_info is None or st.termination is None:
            raise RuntimeError(f"{self.name}: the episode has not ended")
        return EpisodeRecord(
            self.world, list(st.transcript), st.reward_info["reward"], st.reward_info, st.termination, trial
        )


def make_target(config: TargetConfig | None = None) -> TargetEnvironment:
    """The target environment `config` describes, with the scripted or the model-driven user."""
    config = config if config is not None else TargetConfig()
    user = ModelUser(config.user_url or "", config.user_model, config.user_timeout) if config.user == "model" else None
    return TargetEnvironment(config, user)
