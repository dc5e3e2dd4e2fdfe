"""One GRPO update on a family's real rollouts: micro-batches of rows of similar length, each cut
after its last sampled token (`GroupBatch.micro_batches`, today), against micro-batches in arrival
order that all run to the group's longest rollout (before), on the same episodes and advantages.

The family's short warm start (benchmarks/learning.py's size; trained here, or reused from
`--warm`, a learning.py run's warm_start folder) samples `--groups` groups of 8 at T = 1.0 from its
first training seeds with the fitted turn budget, as a GRPO step would. The advantages are random
(a flat group would leave no gradient to compare), the same for both; micro-batches of 2 episodes,
float32. Rounds alternate the two (best of each kept); prints the completion tokens each runs
forward, wall and CPU seconds, the ratio, and the largest difference between their LoRA gradients.

    python benchmarks/micro_batches.py [--family error_recovery] [--groups 2] [--rounds 2] [--threads N] [--warm DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from learning import FULL, family_name, rung_spec, trainer_from_warm_start, warm_started
from timing import Clock, speedup_line

from tracegym.adapters.config import WarmStartConfig
from tracegym.adapters.grpo import TurnGRPOTrainer
from tracegym.adapters.policy_loss import GroupBatch, group_batches
from tracegym.config import RolloutConfig

MICRO_BATCH = 2


class WholeWidth(GroupBatch):
    """The update before: micro-batches in arrival order, each as wide as the group."""

    def micro_batches(self, size: int) -> list[tuple[torch.Tensor, GroupBatch]]:
        rows = torch.arange(len(self))
        return [
            (rows[start : start + size], self.rows(rows[start : start + size])) for start in range(0, len(self), size)
        ]


def forwarded(groups: list[GroupBatch]) -> int:
    """Completion tokens the update runs forward (rows × columns over the micro-batches)."""
    return sum(micro.completion_ids.numel() for group in groups for _, micro in group.micro_batches(MICRO_BATCH))


def gradients(
    trainer: TurnGRPOTrainer, groups: list[GroupBatch], tokens: float, clock: Clock
) -> tuple[float, torch.Tensor]:
    """(loss, flat LoRA gradient) of one update's backward passes over `groups`, timed by `clock`."""
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.model.train()
    with clock:
        loss = sum(trainer._group_backward(group, None, tokens)[0] for group in groups)
    return loss, torch.cat([p.grad.flatten() for p in trainer.policy.parameters() if p.requires_grad])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", type=family_name, default="error_recovery")
    parser.add_argument("--groups", type=int, default=2, help="GRPO groups of 8 rollouts (default 2)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating timing rounds; best of each is kept (default 2)"
    )
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--warm", type=Path, help="a warm_start folder of benchmarks/learning.py to reuse")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    spec, settings, scratch = (
        rung_spec(args.family),
        {**FULL, "micro_batch": MICRO_BATCH},
        Path(tempfile.mkdtemp(prefix="micro_")),
    )
    warm = args.warm or scratch / "warm_start"
    warm_started(spec, settings, WarmStartConfig.learning_rate, warm)
    trainer = trainer_from_warm_start(spec, settings, "grpo", 0, settings["lr"], warm, scratch / "run", RolloutConfig())
    episodes = trainer.rollouts(list(range(spec.train_seeds[0], spec.train_seeds[0] + args.groups)))
    generator = torch.Generator().manual_seed(0)
    advantages = torch.randn(len(episodes), max(len(e.completion_ids) for e in episodes), generator=generator)
    cut = group_batches(episodes, advantages, trainer.pad_id)
    whole = [WholeWidth(g.prompt_ids, g.completion_ids, g.loss_mask, g.advantages) for g in cut]
    tokens = float(sum(g.loss_mask.sum() for g in cut))

    clocks = {"whole": Clock(), "cut": Clock()}
    for _ in range(args.rounds):
        loss_whole, grad_whole = gradients(trainer, whole, tokens, clocks["whole"])
        loss_cut, grad_cut = gradients(trainer, cut, tokens, clocks["cut"])

    lengths = sorted(len(e.completion_ids) for e in episodes)
    print(
        f"{args.family}: {len(episodes)} episodes in {len(cut)} groups, completions {lengths[0]}-{lengths[-1]} tokens "
        f"(median {lengths[len(lengths) // 2]}), {tokens:.0f} sampled, micro-batches of {MICRO_BATCH}, "
        f"{torch.get_num_threads()} threads, best of {args.rounds} rounds"
    )
    for name, groups, label in (
        ("whole", whole, "before: arrival order, group-wide"),
        ("cut", cut, "today: by length, cut"),
    ):
        print(
            f"{label}: {forwarded(groups)} completion tokens forward, {clocks[name].wall:.1f} s wall, "
            f"{clocks[name].cpu:.1f} s CPU"
        )
    print(speedup_line(clocks["whole"], clocks["cut"], goal=1))
    print(
        f"loss {loss_whole:.6f} vs {loss_cut:.6f}; "
        f"largest gradient difference {(grad_whole - grad_cut).abs().max():.2e} "
        f"(largest gradient {grad_whole.abs().max():.2e})"
    )


if __name__ == "__main__":
    main()
