"""What the engine benchmarks share: their flags, best-of-rounds clocks and the old/new ratio line."""

from __future__ import annotations

import argparse
import time

import torch


def engine_arguments(description: str) -> tuple[argparse.Namespace, int, int, int]:
    """Parse --quick, --rounds and --threads (and set torch's threads); returns (args, group size,
    max new tokens a turn, rounds): (4, 16, 1) with --quick, else (8, 128, --rounds)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a group of 4, 16 tokens a turn at most, 1 round")
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating timing rounds; best of each is kept (default 2)"
    )
    parser.add_argument(
        "--threads", type=int, help="torch threads (default: torch's choice; 1 on a machine other jobs share)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    return (args, 4, 16, 1) if args.quick else (args, 8, 128, args.rounds)


class Clock:
    """Best wall-clock and process-CPU seconds over the `with` blocks it timed (CPU time is the
    steadier figure when other jobs share the cores)."""

    def __init__(self) -> None:
        self.wall, self.cpu = float("inf"), float("inf")

    def __enter__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def __exit__(self, *exc: object) -> None:
        self.wall = min(self.wall, time.perf_counter() - self._wall)
        self.cpu = min(self.cpu, time.process_time() - self._cpu)


def speedup_line(old: Clock, new: Clock, goal: float) -> str:
    """'speed-up old/new: W× wall, C× CPU time (goal >= goal× wall)'."""
    return (
        f"speed-up old/new: {old.wall / new.wall:.2f}x wall, {old.cpu / new.cpu:.2f}x CPU time (goal >= {goal:g}x wall)"
    )
