"""Rollout engine (KV caches kept across turns, the group's prompt encoded once) against the
re-encoding engine it replaced (commit 1b8c06d's HFBackend, benchmarks/baseline.py) on the same
episodes: one group of 8 four-turn episodes of the embedded model (benchmarks/four_turn_env.py:
episodes last four turns whatever the untrained model writes; this measures the engine, not skill),
T = 0.7, a turn ending at the end-of-turn token or a newline (~20-30 tokens, like a tool call),
at most 128 tokens.

The new engine plays the episodes; the old one then replays every turn's contexts of those same
episodes (same live episodes and batch per turn), each turn with the longest turn the new engine
sampled as its budget, so it decodes at most as many steps. Rounds alternate the two (best of each
kept), timed in wall-clock and process CPU time; the tokens each feeds the model (non-padding
inputs) are counted. Prints old/new ratios (goal: >= 3x wall).

    python benchmarks/rollout.py [--quick] [--rounds 2] [--threads N]
"""

from __future__ import annotations

import torch
from baseline import BASELINE, old_backend, replay_rollouts
from four_turn_env import four_turn_env
from timing import Clock, engine_arguments, speedup_line

from tracegym.generation import HFBackend, SamplingConfig
from tracegym.models import load_model
from tracegym.rollout import Episode, run_episodes


class FedTokens:
    """Counts the non-padding input tokens of every forward pass of `model` while active."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.count = model, 0

    def _hook(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        self.count += int(mask[:, -ids.shape[1] :].sum()) if mask is not None and mask.dim() == 2 else ids.numel()

    def __enter__(self) -> FedTokens:
        self.count, self._handle = 0, self.model.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()


def main() -> None:
    _, rollouts, new_tokens, rounds = engine_arguments(__doc__.splitlines()[0])
    model, tokenizer = load_model()
    params = SamplingConfig(max_new_tokens=new_tokens, temperature=0.7, seed=11, stop=("\n",))
    new, old = HFBackend(model, tokenizer, batch_size=rollouts), old_backend(model, tokenizer, batch_size=rollouts)
    warm = run_episodes(new, four_turn_env, [1], 1, SamplingConfig(max_new_tokens=2, seed=0))
    replay_rollouts(old, warm, SamplingConfig(max_new_tokens=2, seed=0))

    clocks, fed = {"new": Clock(), "old": Clock()}, {}
    episodes: list[Episode] = []
    for _ in range(rounds):  # alternate, keep the best of each: load on the machine hits both alike
        with clocks["new"], FedTokens(model) as counter:
            episodes = run_episodes(new, four_turn_env, [0], rollouts, params, hint_fraction=0.25)
        fed["new"] = counter.count
        with clocks["old"], FedTokens(model) as counter:
            old_sampled = replay_rollouts(old, episodes, params)
        fed["old"] = counter.count

    turns = [e.turn_ids.count(k) for e in episodes for k in range(max(e.turn_ids) + 1)]
    print(
        f"{len(episodes)} episodes (one group, {sum(e.hinted for e in episodes)} hinted), {len(turns)} turns "
        f"(four-turn episodes: {sum(max(e.turn_ids) == 3 for e in episodes)}), "
        f"{sum(turns) / len(turns):.1f} sampled tokens a turn (longest {max(turns)}), T={params.temperature}, "
        f"{torch.get_num_threads()} threads, best of {rounds} rounds"
    )
    sampled = {"new": sum(turns), "old": old_sampled}
    for side, name in (("new", "new engine"), ("old", f"re-encoding ({BASELINE}), same contexts")):
        print(
            f"{name}: {clocks[side].wall:.1f} s wall, {clocks[side].cpu:.1f} s CPU; {sampled[side]} tokens sampled; "
            f"{fed[side] / len(episodes):.0f} tokens fed to the model per episode"
        )
    print(speedup_line(clocks["old"], clocks["new"], goal=3))


if __name__ == "__main__":
    main()
