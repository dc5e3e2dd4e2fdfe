"""Decode throughput of the routed LoRA mixture against the base model and one unmerged PEFT adapter.

The embedded model (SmolLM2-135M) with 4 random LoRAs of rank 16 on q, k, v, o, gate, up, down
(the shape `tracegym train` writes), saved as standard PEFT folders and loaded back by each
variant. Batch 8 prompts of a fixed length, greedy, every row decoding exactly `--new-tokens`
tokens. Decode tokens per second = 8 / the mean time of a decode step (each step is timestamped
inside `generate`), so the prefill is not counted; in wall time and in process CPU time (the
steadier figure when other jobs share the cores). Prefill tokens per second (CPU time) are
printed too: they decide between the stacked and gather computes. Variants, timed in
interleaved rounds, medians reported:

    base          the plain model
    peft          PeftModel.from_pretrained(base, adapter 1), unmerged
    mixture       the routed mixture, random gates spreading tokens over all 5 slots
                  (default `auto` compute: stacked for these batches; `gather` also timed)
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
from collections.abc import Callable
from pathlib import Path

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


def timed_generate(model: torch.nn.Module, prompts: torch.Tensor, new_tokens: int) -> dict[str, float]:
    """Tokens per second of one greedy `generate` of batch `prompts`: decode (the steps after the
    prefill's token) in wall and process-CPU time, and the prefill in CPU time."""
    clock = _StepClock()
    started = time.process_time()
    model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=0,
        stopping_criteria=StoppingCriteriaList([clock]),
    )
    steps, batch = len(clock.wall) - 1, prompts.shape[0]
    return {
        "decode wall": batch * steps / (clock.wall[-1] - clock.wall[0]),
        "decode cpu": batch * steps / (clock.cpu[-1] - clock.cpu[0]),
        "prefill cpu": prompts.numel() / (clock.cpu[0] - started),
    }


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 new tokens, 2 rounds")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (median kept)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: torch's; 1 is steadier when other jobs share the cores)",
    )
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
    shares = [round(c, 3) for c in (counts / counts.sum()).tolist()]
    print(f"random gates: share of (token, layer) routes per slot {shares}")

    def compute(kind: str) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            set_compute(mixture, kind)
            return timed_generate(mixture, prompts, new_tokens)

        return run

    def forced() -> dict[str, float]:
        with router.forcing(1):
            return timed_generate(mixture, prompts, new_tokens)

    variants: dict[str, Callable[[], dict[str, float]]] = {
        "base": lambda: timed_generate(base, prompts, new_tokens),
        "peft": lambda: timed_generate(peft, prompts, new_tokens),
        "mixture": compute("auto"),
        "mixture-gather": compute("gather"),
        "forced": forced,
    }
    for run in variants.values():  # warm-up
        run()
    measured: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            measured[name].append(run())
    print(
        f"batch {args.batch}, prompt {args.prompt_tokens} tokens, {new_tokens} new tokens, {rounds} rounds (medians), "
        f"{torch.get_num_threads()} torch threads; tokens per second, and as a ratio to base and to peft"
    )
    metrics = list(measured["base"][0])
    rate = {m: {name: statistics.median(r[m] for r in runs) for name, runs in measured.items()} for m in metrics}
    print(f"{'variant':16s}" + "".join(f" {m:>28s}" for m in metrics))
    for name in variants:
        cells = [
            f"{rate[m][name]:10.1f} {rate[m][name] / rate[m]['base']:8.3f} {rate[m][name] / rate[m]['peft']:8.3f}"
            for m in metrics
        ]
        print(f"{name:16s} " + " ".join(cells))
    for m in ("decode wall", "decode cpu"):
        print(
            f"goals ({m}): mixture >= 0.8 x base ({rate[m]['mixture'] / rate[m]['base']:.3f}), "
            f">= 0.9 x peft ({rate[m]['mixture'] / rate[m]['peft']:.3f})"
        )


if __name__ == "__main__":
    main()
