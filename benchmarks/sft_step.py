"""The base agent's SFT step with its prompt detached (`WarmStartConfig.detach_prompt`) against the
full step it replaced (gradient checkpointing on, as configs/default.toml trained before), at the
demo's settings: the embedded model, the target's 7 train-split oracle dialogues with the compact
prompt (~2,560 tokens, half of them prompt), one dialogue a step, bfloat16 autocast, max 3,072 tokens.

Each arm trains a fresh LoRA from the same seed for --steps steps (default 4); prints seconds a step,
first and final loss of each, and the ratio. The first loss is computed with the same weights in both
arms, so it must agree; later losses differ by what the detached gradient leaves out.

Library output (the trainer's loss lines) goes to a scratch log. About 4 minutes with the defaults.

    python benchmarks/sft_step.py [--steps 4] [--rounds 2] [--threads N]
"""

from __future__ import annotations

import argparse
import functools
import tempfile
from pathlib import Path

import torch

from tracegym.adapters.sft import warm_start
from tracegym.adapters.train import load_base
from tracegym.config import DEFAULT_MODEL
from tracegym.eval.config import BaseAgentConfig
from tracegym.eval.run_log import library_output_to, printed_to_log
from tracegym.eval.target import TargetConfig, TargetEnvironment

TARGET = TargetConfig(train_tasks=7, heldout_tasks=7, prompt="compact")
ARMS = {
    "full, checkpointed (before)": {"gradient_checkpointing": True, "detach_prompt": False},
    "prompt detached (now)": {"gradient_checkpointing": False, "detach_prompt": True},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="SFT steps per arm (default 4)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating rounds; each arm's fastest is kept (default 2)"
    )
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    factory = functools.partial(TargetEnvironment, TARGET)
    seconds = {arm: float("inf") for arm in ARMS}
    for round_index in range(args.rounds):
        for arm, switches in ARMS.items():
            model, tokenizer = load_base(DEFAULT_MODEL)
            config = BaseAgentConfig(
                dialogues=7, steps=args.steps, batch_size=1, max_length=3072, bf16=True, **switches
            )
            with (
                tempfile.TemporaryDirectory() as scratch,
                library_output_to(Path(scratch)),
                printed_to_log(Path(scratch)),
            ):
                _, metrics = warm_start(model, tokenizer, [factory], range(7), config, scratch)
            seconds[arm] = min(seconds[arm], metrics["seconds_per_step"])
            print(
                f"round {round_index + 1}, {arm}: {metrics['seconds_per_step']:.1f} s a step, loss "
                f"{metrics['first_loss']:.3f} -> {metrics['final_loss']:.3f} "
                f"({metrics['mean_tokens']:.0f} tokens a dialogue)",
                flush=True,
            )
    before, now = seconds.values()
    print(f"speed-up before/now: {before / now:.2f}x wall a step (fastest of {args.rounds} rounds each)")


if __name__ == "__main__":
    main()
