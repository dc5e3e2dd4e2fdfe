"""Decode throughput of the routed LoRA mixture against the base model and one unmerged PEFT adapter.

The embedded model (SmolLM2-135M) with 4 random LoRAs of rank 16 on q, k, v, o, gate, up, down
(the shape `tracegym train` writes), saved as standard PEFT folders and loaded back by each
variant. Batch 8 prompts of a fixed length, greedy, every row decoding exactly `--new-tokens`
tokens. Decode tokens per second = 8 / the mean time of a decode step (each step is timestamped
inside `generate`), so the prefill is not counted. Variants, timed in interleaved rounds, medians reported:

    base          the plain model
    peft          PeftModel.from_pretrained(base, adapter 1), unmerged
    mixture       the routed mixture, random gates spreading tokens over all 5 slots
                  (stacked compute; `gather` also timed)
    forced        the mixture forced to adapter 1 (what a single-adapter route costs)

Goals (issue 13): mixture ≥ 0.8 × base and ≥ 0.9 × peft.

    python benchmarks/router.py [--quick]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from peft import PeftModel, get_peft_model
from transformers import StoppingCriteria, StoppingCriteriaList

from tracegym.adapters.lora import lora_config
from tracegym.models import load_model
from tracegym.moe_router.lora_weights import read_adapter
from tracegym.moe_router.mixture import attach_mixture, set_compute


def random_adapters(model: torch.nn.Module, count: int, rank: int, folder: Path) -> list[Path]:
    """`count` PEFT folders of random rank-`rank` LoRAs (B drawn at random, not zero) for `model`."""
    paths = []
    for index in range(count):
        torch.manual_seed(100 + index)
        config = lora_config(rank)
        config.init_lora_weights = False
        peft_model = get_peft_model(copy.deepcopy(model), config)
        path = folder / f"adapter{index}"
        peft_model.save_pretrained(str(path))
        paths.append(path)
    return paths


class _StepClock(StoppingCriteria):
    """Wall and process-CPU timestamps of every generation step (called once per sampled token)."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: object) -> torch.BoolTensor:
        self.wall.append(time.perf_counter())
        self.cpu.append(time.process_time())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def decode_seconds(model: torch.nn.Module, prompts: torch.Tensor, new_tokens: int) -> tuple[float, float]:
    """Wall and CPU seconds per greedy decode step of batch `prompts` (the steps after the
    prefill's token)."""
    clock = _StepClock()
    model.generate(
        input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
        do_sample=False, pad_token_id=0, stopping_criteria=StoppingCriteriaList([clock]),
    )
    steps = len(clock.wall) - 1
    return (clock.wall[-1] - clock.wall[0]) / steps, (clock.cpu[-1] - clock.cpu[0]) / steps


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 new tokens, 2 rounds")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (median kept)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's; 1 is steadier when other jobs share the cores)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    new_tokens, rounds = (16, 2) if args.quick else (args.new_tokens, args.rounds)
    torch.set_grad_enabled(False)
    base, _ = load_model()
    with tempfile.TemporaryDirectory() as scratch:
        folders = random_adapters(base, 4, 16, Path(scratch))
        peft = PeftModel.from_pretrained(copy.deepcopy(base), str(folders[0])).eval()
        mixture = copy.deepcopy(base)
        router = attach_mixture(mixture, [read_adapter(f) for f in folders])
    generator = torch.Generator().manual_seed(0)
    router.gate_weight.normal_(0.0, 1.0, generator=generator)
    prompts = torch.randint(100, 40_000, (args.batch, args.prompt_tokens), generator=generator)
    with router.recording() as decisions:
        mixture(prompts)
    counts = torch.bincount(torch.cat([d.flatten() for d in decisions]), minlength=router.num_slots)
    print(f"random gates: share of (token, layer) routes per slot {[round(c, 3) for c in (counts / counts.sum()).tolist()]}")

    def compute(kind: str) -> Callable[[], tuple[float, float]]:
        def run() -> tuple[float, float]:
            set_compute(mixture, kind)
            return decode_seconds(mixture, prompts, new_tokens)

        return run

    def forced() -> tuple[float, float]:
        with router.forcing(1):
            return decode_seconds(mixture, prompts, new_tokens)

    variants: dict[str, Callable[[], tuple[float, float]]] = {
        "base": lambda: decode_seconds(base, prompts, new_tokens),
        "peft": lambda: decode_seconds(peft, prompts, new_tokens),
        "mixture": compute("stacked"),
        "mixture-gather": compute("gather"),
        "forced": forced,
    }
    for run in variants.values():  # warm-up
        run()
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            times[name].append(run())
    print(f"batch {args.batch}, prompt {args.prompt_tokens} tokens, {new_tokens} new tokens, {rounds} rounds (medians), "
          f"{torch.get_num_threads()} torch threads")
    print(f"{'variant':16s} {'wall tok/s':>10s} {'vs base':>8s} {'vs peft':>8s} {'cpu tok/s':>10s} {'vs base':>8s} {'vs peft':>8s}")
    rates = {}
    for clock in (0, 1):
        rates[clock] = {name: args.batch / statistics.median(v[clock] for v in values) for name, values in times.items()}
    for name in variants:
        cells = [f"{rates[c][name]:10.1f} {rates[c][name] / rates[c]['base']:8.3f} {rates[c][name] / rates[c]['peft']:8.3f}" for c in (0, 1)]
        print(f"{name:16s} {cells[0]} {cells[1]}")
    for clock, label in ((0, "wall"), (1, "cpu")):
        rate = rates[clock]
        print(f"goals ({label}): mixture >= 0.8 x base ({rate['mixture'] / rate['base']:.3f}), "
              f">= 0.9 x peft ({rate['mixture'] / rate['peft']:.3f})")


if __name__ == "__main__":
    main()
