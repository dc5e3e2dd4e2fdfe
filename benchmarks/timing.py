"""Timing shared by the engine benchmarks: best-of-rounds clocks and the old/new ratio line."""

from __future__ import annotations

import time


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
    return f"speed-up old/new: {old.wall / new.wall:.2f}x wall, {old.cpu / new.cpu:.2f}x CPU time (goal >= {goal:g}x wall)"
