"""One GRPO step (rollouts, trace credit, update) of today's trainer against commit 1b8c06d's step at
equal rollouts: one group of 8 four-turn episodes of the embedded model (benchmarks/four_turn_env.py
measures the engine, not skill), hint fraction 0.25, T = 1.0, turns ending at the end-of-turn token
or a newline (at most 128 tokens), LoRA rank 16, micro-batches of 2 episodes, mini_batches 1; the new
update in bfloat16 autocast (`TurnGRPOConfig.bf16`, as configs/default.toml trains), the baseline's in
float32 (BASELINE had no such option).
Memory: a micro-batch of n four-turn episodes (~1,200 completion tokens each) keeps ~3.5·n GB of
attention weights for the backward pass (CPU SDPA with a mask materialises them); measured peak
14.8 GB with n = 4.

The new trainer runs `train_step`. The baseline then does that step's work the old way on the same
episodes (benchmarks/baseline.py), with its own copy of the model and the same fresh LoRA: the old
engine replays every turn's contexts of the step's episodes, the old trace credit scores the kept
episodes (one packed forward pass per episode, each with its prompt; today's encodes a group's
prompt once), and the old update trains on them (an old-log-prob pass, then every episode's whole
sequence). Rounds alternate the two (best of each kept), in wall-clock and process CPU time, with
the seconds of each phase.

    python benchmarks/grpo_step.py [--quick] [--rounds 2] [--threads N]
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from baseline import BASELINE, baseline_trainer, old_backend, replay_rollouts
from four_turn_env import four_turn_env
from timing import Clock, engine_arguments, speedup_line

from tracegym.adapters import grpo
from tracegym.adapters.config import CreditConfig, TurnGRPOConfig
from tracegym.adapters.grpo import TurnGRPOTrainer, varied_groups
from tracegym.adapters.lora import attach_lora
from tracegym.config import RolloutConfig
from tracegym.generation import SamplingConfig
from tracegym.models import load_model
from tracegym.rollout import Episode

PHASES = ("rollouts", "advantages", "update")
STOP = ("\n",)


def timed(trainer: TurnGRPOTrainer, seconds: dict[str, float], episodes: list[list[Episode]]) -> None:
    """Make the trainer record the wall seconds of each phase of its last step in `seconds`, and the
    episodes of its last rollouts in `episodes[0]`."""
    for phase in PHASES:
        method: Callable[..., Any] = getattr(trainer, phase)

        def run(*args: Any, _method: Callable[..., Any] = method, _phase: str = phase) -> Any:
            started = time.perf_counter()
            try:
                result = _method(*args)
                if _phase == "rollouts":
                    episodes[:] = [result]
                return result
            finally:
                seconds[_phase] = time.perf_counter() - started

        setattr(trainer, phase, run)


def baseline_step(trainer: Any, episodes: list[Episode], params: SamplingConfig, seconds: dict[str, float]) -> None:
    """The old step's work on the new step's `episodes`: replayed rollouts, credit, old update."""
    started = time.perf_counter()
    replay_rollouts(old_backend(trainer.policy, trainer.tokenizer, batch_size=len(episodes)), episodes, params)
    seconds["rollouts"] = time.perf_counter() - started
    kept = [e for group in varied_groups(episodes, trainer.config.group_size) for e in group]
    if kept:
        started = time.perf_counter()
        advantages = trainer.advantages(kept)
        seconds["advantages"] = time.perf_counter() - started
        started = time.perf_counter()
        trainer.update(trainer.old_batch(kept, advantages))
        seconds["update"] = time.perf_counter() - started


def main() -> None:
    _, group, new_tokens, rounds = engine_arguments(__doc__.splitlines()[0])
    config = TurnGRPOConfig(
        steps=rounds,
        groups_per_step=1,
        group_size=group,
        micro_batch_size=2,
        hint_fraction=0.25,
        credit=CreditConfig(credit="trace"),
        lora_rank=16,
        max_redraws=0,
        bf16=True,
    )
    rollout = RolloutConfig(temperature=1.0, max_new_tokens=new_tokens)
    # the untrained model rambles until the token budget, which would end episodes after one turn
    grpo.SamplingConfig = functools.partial(SamplingConfig, stop=STOP)  # type: ignore[attr-defined]
    out = tempfile.mkdtemp(prefix="grpo_step_")
    trainers = {}
    for name, cls in (("new", TurnGRPOTrainer), ("old", baseline_trainer(TurnGRPOTrainer))):
        model, tokenizer = load_model()
        trainers[name] = cls(
            attach_lora(model, rank=config.lora_rank), tokenizer, four_turn_env, config, rollout, f"{out}/{name}"
        )
    seconds: dict[str, dict[str, float]] = {"new": {}, "old": {}}
    played: list[list[Episode]] = [[]]
    timed(trainers["new"], seconds["new"], played)

    clocks = {name: Clock() for name in trainers}
    phases: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(lambda: float("inf")))
    for step in range(rounds):  # alternate, keep the best of each: load on the machine hits both alike
        with clocks["new"]:
            record = trainers["new"].train_step()
        params = SamplingConfig(max_new_tokens=new_tokens, temperature=rollout.temperature, seed=step, stop=STOP)
        with clocks["old"]:
            baseline_step(trainers["old"], played[0], params, seconds["old"])
        for name in trainers:
            for phase, value in seconds[name].items():
                phases[name][phase] = min(phases[name][phase], value)

    episodes = played[0]
    turns = [e.turn_ids.count(k) for e in episodes for k in range(max(e.turn_ids) + 1)]
    print(
        f"one GRPO step: {len(episodes)} episodes (four-turn: {sum(max(e.turn_ids) == 3 for e in episodes)}), "
        f"{sum(turns) / len(turns):.1f} sampled tokens a turn, kept {record['kept_groups']} group(s), "
        f"{record['train_tokens']:.0f} trained tokens, {torch.get_num_threads()} threads, best of {rounds} rounds"
    )
    for name, label in (("new", "new step"), ("old", f"{BASELINE} step, same episodes")):
        split = ", ".join(f"{phase} {phases[name][phase]:.1f} s" for phase in PHASES)
        print(f"{label}: {clocks[name].wall:.1f} s wall, {clocks[name].cpu:.1f} s CPU ({split})")
    print(speedup_line(clocks["old"], clocks["new"], goal=2))


if __name__ == "__main__":
    main()
