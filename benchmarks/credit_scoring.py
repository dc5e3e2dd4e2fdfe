"""Packed vs per-prefix reference scoring (TRACE turn credit) on the embedded model.

One ~600-token trajectory with 8 boundaries and a ~12-token gold answer: `score_packed` scores all
8 prefixes in one forward pass, `score_prefixes` runs one forward per prefix. Prints the speed
ratio in wall-clock and process CPU time (goal >= 3x) and the largest absolute difference of the ℓ values.

    python benchmarks/credit_scoring.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from tracegym.adapters.reference_scoring import score_packed, score_prefixes
from tracegym.models import load_model

GOLD_TEXT = "Item IT-171 now holds 19 units."  # 13 tokens


def _timed(fns: dict[str, Callable[[], torch.Tensor]], repeats: int) -> dict[str, tuple[float, float, torch.Tensor]]:
    """Median wall and process-CPU seconds and the last result of each function, runs interleaved
    so load on the machine affects both alike (CPU time is the steadier figure on shared cores)."""
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    results: dict[str, torch.Tensor] = {}
    for _ in range(repeats):
        for name, fn in fns.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            results[name] = fn()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name]), results[name]) for name in fns}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (2 instead of 5)")
    parser.add_argument("--length", type=int, default=600, help="trajectory tokens (default 600)")
    parser.add_argument("--boundaries", type=int, default=8, help="boundary prefixes (default 8)")
    args = parser.parse_args()
    torch.manual_seed(0)
    model, tokenizer = load_model()
    gold = tokenizer(GOLD_TEXT, add_special_tokens=False)["input_ids"]
    ids = torch.randint(100, len(tokenizer), (args.length,)).tolist()
    first = args.length // 4  # the prompt; then boundaries evenly spaced up to the end
    step = (args.length - first) / (args.boundaries - 1)
    boundaries = [round(first + i * step) for i in range(args.boundaries)]
    repeats = 2 if args.quick else 5
    with torch.inference_mode():
        score_packed(model, ids, boundaries, gold)  # warm-up (same kernels as per-prefix)
        timed = _timed(
            {
                "packed": lambda: score_packed(model, ids, boundaries, gold),
                "single": lambda: score_prefixes(model, ids, boundaries, gold),
            },
            repeats,
        )
    (packed_s, packed_cpu, packed), (single_s, single_cpu, single) = timed["packed"], timed["single"]
    print(
        f"trajectory {args.length} tokens, {len(boundaries)} boundaries, gold {len(gold)} tokens, "
        f"{torch.get_num_threads()} threads, median of {repeats}"
    )
    print(f"per-prefix: {single_s * 1000:8.1f} ms wall {single_cpu * 1000:8.1f} ms CPU")
    print(f"packed:     {packed_s * 1000:8.1f} ms wall {packed_cpu * 1000:8.1f} ms CPU")
    print(
        f"speed ratio packed/per-prefix: {single_s / packed_s:.2f}x wall, "
        f"{single_cpu / packed_cpu:.2f}x CPU time (goal >= 3x)"
    )
    print(f"max |ℓ_packed - ℓ_per_prefix|: {(packed - single).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
