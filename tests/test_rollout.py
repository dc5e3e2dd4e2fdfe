"""Rollout engine: token accounting, loss mask, boundaries, hints, rewards (tiny model + scripted policy)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from tracegym.generation import Completion, GenerationBackend, HFBackend, SamplingConfig, render_chat
from tracegym.rollout import ChatSegments, Episode, run_episodes, turn_token_budget
from tracegym.synth_envs.base import Environment, ToolError
from tracegym.synth_envs.tools import tool
from tracegym.toolcalls import render_tool_call


@dataclass
class ChainConfig:
    hops: int = 2
    key_digits: int = 3  # digits of each key (longer keys, longer tool-call turns)


class KeyChainEnv(Environment):
    """Follow `hops` keys through a lookup table, then answer the last value.

    Reward: 0.5 for the right value + 0.5 for having looked up every key of the chain."""

    name = "key_chain_test"
    capability = "multi_step_lookup"
    description = "follow a chain of lookups"
    Config = ChainConfig
    max_turns = 6
    instructions = "Answer with the value the chain of keys leads to."

    def _generate(self, seed: int) -> tuple[str, ...]:
        rng = random.Random(seed)
        keys = [f"k{rng.randrange(10**self.config.key_digits)}" for _ in range(self.config.hops)]
        return (*keys, f"v{rng.randrange(1000)}")

    def _task(self) -> str:
        return f"Start at key {self.world[0]}."

    @tool
    def lookup(self, key: str) -> dict[str, str]:
        """value stored under a key"""
        if key not in self.world[:-1]:
            raise ToolError(f"no key {key}")
        return {"value": self.world[self.world.index(key) + 1]}

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        right = final_answer.strip() == self.world[-1]
        followed = {c.arguments["key"] for c in self.calls} >= set(self.world[:-1])
        return 0.5 * right + 0.5 * followed, {"right": right, "followed": followed}

    def _oracle(self) -> list[str]:
        return [render_tool_call("lookup", {"key": k}) for k in self.world[:-1]] + [self.world[-1]]

    def _wrong(self) -> list[list[str]]:
        return [self._oracle()[:-1] + ["v-1"], [self.world[-1]]]

    def _hint(self) -> str:
        return "Look up each key in turn."


class ScriptedBackend(GenerationBackend):
    """A deterministic policy replaying, turn by turn, scripts keyed by the first user message.

    Each turn is tokenised as the chat template tokenises it, so the replayed tokens are canonical.
    """

    def __init__(self, tokenizer, scripts: dict[str, list[str]]) -> None:
        self.tokenizer, self.scripts = tokenizer, scripts
        self.header = render_chat(tokenizer, [{"role": "system", "content": "s"}])
        self.suffix = ChatSegments(tokenizer).turn_suffix

    def _turn_ids(self, text: str) -> list[int]:
        """The template's tokens of an assistant turn `text`, through its end-of-turn token."""
        full = render_chat(
            self.tokenizer, [{"role": "system", "content": "s"}, {"role": "assistant", "content": text}], False
        )
        return full[len(self.header) : len(full) - len(self.suffix)]

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingConfig, seeds: Sequence[int] | None = None
    ) -> list[Completion]:
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            task = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
            turn = text.count("<|im_start|>assistant\n") - 1
            reply = self.scripts[task][turn]
            ids = self._turn_ids(reply)
            out.append(Completion(text=reply, token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop"))
        return out


def _check_invariants(episode: Episode) -> None:
    n = len(episode.completion_ids)
    assert len(episode.loss_mask) == len(episode.logprobs) == len(episode.turn_ids) == n
    assert episode.boundaries[0] == 0 and episode.boundaries == sorted(episode.boundaries)
    for mask, logprob, turn in zip(episode.loss_mask, episode.logprobs, episode.turn_ids):
        assert (turn >= 0) == (mask == 1)
        if mask == 0:
            assert logprob == 0.0
    # action k starts exactly at boundary k, and turn ids are contiguous and increasing
    turns = [t for t in episode.turn_ids if t >= 0]
    assert turns == sorted(turns)
    for k, boundary in enumerate(episode.boundaries):
        if boundary < n:
            assert episode.turn_ids[boundary] == k


def test_scripted_oracle_rollout_is_exact(tiny):
    _, tokenizer = tiny
    env = KeyChainEnv(hops=3)
    seeds = [1, 2, 3]
    scripts = {env.reset(s): env.oracle(s) for s in seeds}
    scripts_wrong = {task: script[:-1] + ["nope"] for task, script in scripts.items()}
    params = SamplingConfig(max_new_tokens=64)
    good = run_episodes(
        ScriptedBackend(tokenizer, scripts), lambda: KeyChainEnv(hops=3), seeds, 2, params, hint_fraction=0.5
    )
    bad = run_episodes(ScriptedBackend(tokenizer, scripts_wrong), lambda: KeyChainEnv(hops=3), seeds, 1, params)
    assert [e.seed for e in good] == [1, 1, 2, 2, 3, 3]
    assert [e.hinted for e in good] == [True, False] * 3
    assert all(e.reward == 1.0 for e in good) and all(e.reward == 0.5 for e in bad)
    for episode in good + bad:
        _check_invariants(episode)
        assert episode.num_actions == 3 and episode.info["finish"] == "answer"
        assert episode.prompt_ids + episode.completion_ids == render_chat(
            tokenizer, episode.messages, add_generation_prompt=False
        )
        # S_k ends with the assistant header after the k-th tool response
        for boundary in episode.boundaries[1:]:
            context = tokenizer.decode(episode.prompt_ids + episode.completion_ids[:boundary])
            assert context.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
        assert [m.role for m in episode.messages] == ["system", "user"] + ["assistant", "user"] * 3 + ["assistant"]
        assert sum(episode.loss_mask) == sum(
            len(ScriptedBackend(tokenizer, {})._turn_ids(m.content)) for m in episode.messages if m.role == "assistant"
        )
    hinted, plain = good[0], good[1]
    assert "Hint: Look up each key in turn." in hinted.messages[0].content
    assert hinted.train_prompt_ids == plain.prompt_ids == plain.train_prompt_ids != hinted.prompt_ids
    assert hinted.completion_ids == plain.completion_ids


def test_max_turns_ends_on_an_observation_with_header(tiny):
    _, tokenizer = tiny
    env = KeyChainEnv(hops=2)
    looping = {env.reset(0): [render_tool_call("lookup", {"key": "zz"})] * KeyChainEnv.max_turns}
    (episode,) = run_episodes(
        ScriptedBackend(tokenizer, looping), lambda: KeyChainEnv(hops=2), [0], 1, SamplingConfig()
    )
    _check_invariants(episode)
    assert episode.info["finish"] == "max_turns" and episode.info["errors"] == KeyChainEnv.max_turns
    assert episode.num_actions == KeyChainEnv.max_turns and episode.boundaries[-1] == len(episode.completion_ids)
    assert episode.prompt_ids + episode.completion_ids == render_chat(
        tokenizer, episode.messages, add_generation_prompt=True
    )


@pytest.mark.parametrize("stop", [(), ("e",)])
def test_tiny_model_rollouts_keep_the_accounting(tiny, stop):
    """Random policy: turns cut at max_new_tokens, or (with a stop string) ended without the
    end-of-turn token and scored as final answers; template pieces stay exact."""
    model, tokenizer = tiny
    params = SamplingConfig(max_new_tokens=12, temperature=1.0, seed=5, stop=stop)
    episodes = run_episodes(
        HFBackend(model, tokenizer), lambda: KeyChainEnv(hops=2), [4, 5], 3, params, hint_fraction=1 / 3
    )
    assert len(episodes) == 6 and sum(e.hinted for e in episodes) == 2
    segments = ChatSegments(tokenizer)
    for episode in episodes:
        _check_invariants(episode)
        assert 0.0 <= episode.reward <= 1.0
        # sampled tokens are exactly the policy's: each policy token run is one turn of <= 12 tokens
        for k in range(max(episode.turn_ids) + 1):
            assert 1 <= episode.turn_ids.count(k) <= 12
        # replacing each sampled turn by its canonical encoding reproduces the chat template exactly
        canonical, position = list(episode.prompt_ids), 0
        ids = episode.completion_ids
        assistant_texts = [m.content for m in episode.messages if m.role == "assistant"]
        for k, text in enumerate(assistant_texts):
            start = episode.turn_ids.index(k)
            canonical += ids[position:start] + ScriptedBackend(tokenizer, {})._turn_ids(text)
            position = start + episode.turn_ids.count(k)
            if ids[position - 1] != segments.eos:
                position += 1  # skip the end-of-turn token the engine added to a cut turn
        canonical += ids[position:]
        assert episode.info["finish"] in (("answer", "length") if stop else ("length",))
        assert canonical == render_chat(tokenizer, episode.messages, add_generation_prompt=False)
    assert not stop or any(e.info["finish"] == "answer" for e in episodes)


def test_unset_turn_budget_is_fitted_to_the_oracle(tiny):
    model, tokenizer = tiny
    env = KeyChainEnv(hops=2)
    longest = max(
        len(tokenizer(turn, add_special_tokens=False)["input_ids"]) for s in range(16) for turn in env.oracle(s)
    )
    budget = turn_token_budget(env, tokenizer)
    assert budget % 16 == 0 and 1.25 * longest <= budget < 1.25 * longest + 16
    # memoised per knobs, not per family: longer keys make longer tool-call turns and a larger budget
    assert turn_token_budget(KeyChainEnv(hops=2, key_digits=40), tokenizer) > budget
    assert turn_token_budget(KeyChainEnv(hops=2), tokenizer) == budget
    params = SamplingConfig(max_new_tokens=None, temperature=1.0, seed=5)
    episode = run_episodes(HFBackend(model, tokenizer), lambda: KeyChainEnv(hops=2), [4], 1, params)[0]
    assert episode.info["finish"] == "length" and episode.turn_ids.count(0) == budget  # a random policy runs to the cut
    with pytest.raises(ValueError, match="max_new_tokens is None"):
        HFBackend(model, tokenizer).generate([[1, 2]], params)


def test_rejects_bad_hint_fraction(tiny):
    _, tokenizer = tiny
    with pytest.raises(ValueError, match="hint_fraction"):
        run_episodes(ScriptedBackend(tokenizer, {}), KeyChainEnv, [0], 1, SamplingConfig(), hint_fraction=1.5)


@pytest.mark.slow
def test_embedded_model_rollouts_on_a_family():
    """The embedded model against a real family: invariants hold, and the recorded log-probs are the
    model's at the sampling temperature (the backend's scores are temperature-scaled logits)."""
    import torch

    from tracegym.models import load_model
    from tracegym.synth_envs.registry import make_env

    model, tokenizer = load_model()
    params = SamplingConfig(max_new_tokens=24, temperature=0.7, seed=3)
    episodes = run_episodes(
        HFBackend(model, tokenizer), lambda: make_env("multi_step_task_completion"), [0, 1], 2, params, 0.5
    )
    for episode in episodes:
        _check_invariants(episode)
        ids = torch.tensor([episode.prompt_ids + episode.completion_ids])
        with torch.no_grad():
            logprobs = (model(input_ids=ids).logits[0, :-1] / params.temperature).log_softmax(-1)
        targets = ids[0, 1:]
        recomputed = logprobs.gather(-1, targets[:, None])[:, 0][len(episode.prompt_ids) - 1 :]
        mask = torch.tensor(episode.loss_mask, dtype=torch.bool)
        assert torch.allclose(recomputed[mask], torch.tensor(episode.logprobs)[mask], atol=1e-3)
