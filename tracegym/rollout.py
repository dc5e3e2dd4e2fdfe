"""Batched multi-turn rollouts of a policy against environments, with exact token accounting.

Every live episode generates its next assistant turn in one call of a generation session; the
turn is stepped through its own `Environment`; tool responses are appended as user turns; finished
episodes drop out. The context fed to the backend is always the episode's own token ids (prompt
plus everything sampled and appended so far), never a re-rendered chat, so the recorded tokens are
exactly the ones the policy conditioned on. The session of the hf backend keeps each episode's KV
cache across its turns (only the observation and the next header are encoded), encodes the
prompt a group of rollouts shares once, and holds the system prompt's cache once for all the
episodes of a turn (tracegym.kv_session).

Sampling seeds. Turn t of rollout r of seed s samples with seed
sampling_seed(params.seed, s, r, t): the tokens of an episode do not depend on the other episodes
in the call, so the same (sampling seed, seeds) draw the same random numbers before and after
training, and the same seed listed twice gives the same episodes.

Token accounting. `prompt_ids + completion_ids` equals
`render_chat(tokenizer, messages, add_generation_prompt=False)` of the final dialogue, with two
documented exceptions:
- an assistant turn is recorded as the tokens the policy sampled; if they are not the tokenizer's
  own encoding of their decoded text (a non-canonical split, or special tokens the decoding drops)
  only that turn's tokens differ;
- an episode that ends on an observation (the environment's `max_turns` reached on a tool call)
  ends with the assistant header as well, so the last state S_T is a complete prefix for turn
  credit; there the sequence equals `render_chat(..., add_generation_prompt=True)`.
Template tokens the policy did not sample (the newline after `<|im_end|>`, the observation turns,
the next assistant header, and an `<|im_end|>` closing a turn cut at `max_new_tokens`) carry
`loss_mask` 0, `logprobs` 0.0 and `turn_ids` -1.

Turns. Assistant turn k (0-based) is action k. Every turn but the last is a tool-call action
followed by an observation; the last is the final answer, or a turn cut at `max_new_tokens`, or
(on `max_turns`) the T-th tool call. `boundaries[k]` is the completion position where state S_k
ends: 0 for S_0 (the prompt), and after the k-th observation and the next assistant header
otherwise, i.e. the position where action k's tokens begin. So T = len(boundaries) - 1 tool-call
actions, and turn id T (when present) is the final answer.

Rewards. The environment's reward when it ends the episode; 0.0 for a turn cut at
`max_new_tokens` (the episode never finished), with `info["finish"] == "length"`.

Turn budget. `max_new_tokens=None` fits the budget to the environment (`turn_token_budget`): a
budget below the oracle's own turns caps reward whatever the policy knows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from tracegym.config import RolloutConfig
from tracegym.environment import Environment
from tracegym.generation import Completion, GenerationBackend, SamplingConfig, render_chat, sampling_seed
from tracegym.schema import Message

HINT_SEPARATOR = "\n\nHint: "


@dataclass
class Episode:
    """One rollout. Lists over completion tokens all have len(completion_ids) entries.

    `logprobs` are what the backend reports for the sampled tokens: log-probs of the sampling
    distribution, i.e. of the temperature-scaled logits (equal to the model's own at temperature 1).
    """

    seed: int
    hinted: bool
    messages: list[Message]
    prompt_ids: list[int]
    train_prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_ids: list[int] = field(default_factory=list)
    boundaries: list[int] = field(default_factory=lambda: [0])
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def num_actions(self) -> int:
        """T: the number of tool-call actions (states S_0..S_T)."""
        return len(self.boundaries) - 1

    def _append(self, ids: Sequence[int], logprobs: Sequence[float] | None = None, turn: int = -1) -> None:
        sampled = logprobs is not None
        self.completion_ids.extend(ids)
        self.loss_mask.extend([1 if sampled else 0] * len(ids))
        self.logprobs.extend(logprobs if sampled else [0.0] * len(ids))
        self.turn_ids.extend([turn if sampled else -1] * len(ids))


def hinted_system_prompt(env: Environment, seed: int) -> str:
    """The system prompt of a hinted rollout: the environment's, plus its hint for `seed`."""
    return env.system_prompt + HINT_SEPARATOR + env.hint(seed)


class ChatSegments:
    """Token pieces of a chat template that is additive over messages (ChatML and the like).

    `turn_suffix`: the template tokens after a message's end-of-turn token (ChatML: a newline).
    `observation(text, header)`: a user turn, optionally followed by the assistant header.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.eos = tokenizer.eos_token_id
        self._anchor = [Message(role="system", content="s")]
        base = render_chat(tokenizer, self._anchor, add_generation_prompt=False)
        if self.eos not in base:
            raise ValueError("chat template does not end a turn with the tokenizer's eos token")
        self.turn_suffix = base[len(base) - base[::-1].index(self.eos) :]
        self._base_len = len(base)

    def observation(self, text: str, header: bool) -> list[int]:
        ids = render_chat(
            self.tokenizer, [*self._anchor, Message(role="user", content=text)], add_generation_prompt=header
        )
        return ids[self._base_len :]


def turn_token_budget(
    env: Environment, tokenizer: PreTrainedTokenizerBase, seeds: Sequence[int] = range(16), slack: float = 1.25
) -> int:
    """Tokens per assistant turn that fit `env`'s oracle: `slack` × its longest oracle turn over
    `seeds`, rounded up to a multiple of 16.

    Families differ several-fold (the embedded tokenizer: precondition checks need ≤ 71 tokens a
    turn, bulk updates in multi-step completion up to ~210, grouped answers in structured data
    reasoning ~250), so no one fixed number suits all. It costs 16 oracle plays: callers that roll
    out the same environment again and again fit it once (`fit_turn_budget`).
    """
    longest = max(
        len(tokenizer(turn, add_special_tokens=False)["input_ids"]) for seed in seeds for turn in env.oracle(seed)
    )
    return 16 * math.ceil(slack * longest / 16)


def fit_turn_budget(rollout: RolloutConfig, env: Environment, tokenizer: PreTrainedTokenizerBase) -> RolloutConfig:
    """`rollout` with its turn budget fixed: `max_new_tokens` as set, or fitted to `env`."""
    if rollout.max_new_tokens is not None:
        return rollout
    return replace(rollout, max_new_tokens=turn_token_budget(env, tokenizer))


def _start(env: Environment, seed: int, hinted: bool, tokenizer: PreTrainedTokenizerBase) -> Episode:
    task = env.reset(seed)
    plain = [Message(role="system", content=env.system_prompt), Message(role="user", content=task)]
    train_prompt = render_chat(tokenizer, plain)
    if not hinted:
        return Episode(seed, False, plain, train_prompt, list(train_prompt))
    messages = [Message(role="system", content=hinted_system_prompt(env, seed)), plain[1]]
    return Episode(seed, True, messages, render_chat(tokenizer, messages), train_prompt)


def _advance(episode: Episode, env: Environment, completion: Completion, segments: ChatSegments) -> bool:
    """Record one sampled turn and step the environment; True while the episode goes on."""
    if len(completion.logprobs) != len(completion.token_ids):
        raise ValueError("backend returned a completion without one log-prob per token")
    episode._append(completion.token_ids, completion.logprobs, turn=episode.num_actions)
    episode.messages.append(Message(role="assistant", content=completion.text))
    if not completion.token_ids or completion.token_ids[-1] != segments.eos:
        episode._append([segments.eos])
    episode._append(segments.turn_suffix)
    if completion.finish_reason == "length":
        episode.reward, episode.info = 0.0, {"finish": "length", "errors": env.errors, "turns": env.turns + 1}
        return False
    result = env.step(completion.text)
    if result.terminated:
        episode.reward, episode.info = result.reward, {**result.info, "finish": "answer"}
        return False
    episode.messages.append(Message(role="user", content=result.observation))
    episode._append(segments.observation(result.observation, header=True))
    episode.boundaries.append(len(episode.completion_ids))
    if result.truncated:
        episode.reward, episode.info = result.reward, {**result.info, "finish": "max_turns"}
        return False
    return True


def run_episodes(
    backend: GenerationBackend,
    env_factory: Callable[[], Environment],
    seeds: Sequence[int],
    rollouts_per_seed: int,
    params: SamplingConfig,
    hint_fraction: float = 0.0,
    progress: bool = False,
) -> list[Episode]:
    """Roll out `rollouts_per_seed` episodes for every seed, all live episodes batched per turn.

    The first round(hint_fraction * rollouts_per_seed) rollouts of each seed are hinted (the
    environment's hint appended to the system prompt). Episodes come back seed-major in the order
    of `seeds`. An episode ends on a final answer, at the environment's `max_turns`, or when a turn
    hits `params.max_new_tokens` without ending; `max_new_tokens=None` uses `turn_token_budget`.
    """
    if not 0.0 <= hint_fraction <= 1.0:
        raise ValueError(f"hint_fraction must be in [0, 1], got {hint_fraction}")
    segments = ChatSegments(backend.tokenizer)
    if params.max_new_tokens is None:
        params = replace(params, max_new_tokens=turn_token_budget(env_factory(), backend.tokenizer))
    hinted_count = round(hint_fraction * rollouts_per_seed)
    envs = [env_factory() for _ in range(len(seeds) * rollouts_per_seed)]
    episodes = [
        _start(envs[i * rollouts_per_seed + r], seed, r < hinted_count, backend.tokenizer)
        for i, seed in enumerate(seeds)
        for r in range(rollouts_per_seed)
    ]
    live = list(range(len(episodes)))
    bar = tqdm(total=len(episodes), desc="rollouts", unit="episode", disable=not progress)
    turn = 0
    with backend.session() as session:
        while live:
            contexts = [episodes[i].prompt_ids + episodes[i].completion_ids for i in live]
            seeds = (
                None
                if params.seed is None
                else [sampling_seed(params.seed, episodes[i].seed, i % rollouts_per_seed, turn) for i in live]
            )
            completions = session.generate(contexts, params, seeds)
            still = [i for i, c in zip(live, completions) if _advance(episodes[i], envs[i], c, segments)]
            bar.update(len(live) - len(still))
            bar.set_postfix(turn=turn, live=len(still))
            live, turn = still, turn + 1
    bar.close()
    return episodes
