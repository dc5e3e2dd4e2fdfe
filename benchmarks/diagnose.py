"""Deterministic labelling throughput on the τ² airline runs, as a ratio to ingestion alone.

Both sides are timed in CPU seconds of this process on the same 384 airline trajectories:
ingestion is `ingest_paths` on ../shared/data/tau2/results/airline (parse, validate, convert,
cross-check); labelling is `label_deterministic` over the catalogue on the ingested
trajectories; "diagnose" adds contrast, attribution and selection (1,000 bootstrap resamples)
to labelling. Each side alternates `--repeats` times and keeps its best. The figure printed is
labelling throughput / ingestion throughput; goal: > 1 (labelling costs less than ingesting).

    python benchmarks/diagnose.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tracegym.analysis.catalogue import catalogue_for
from tracegym.analysis.detectors import label_deterministic
from tracegym.analysis.diagnose import diagnose
from tracegym.analysis.ingest import ingest_paths

GOAL = 1.0


def airline_runs() -> Path:
    root = Path(os.environ.get("TRACEGYM_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
    return root / "tau2" / "results" / "airline"


def best_cpu_seconds(work: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions per side, best kept (default 5)")
    args = parser.parse_args()
    folder = airline_runs()
    if not folder.is_dir():
        print(f"skipped: {folder} is absent (set TRACEGYM_SHARED_DATA)")
        return 0
    trajectories = ingest_paths([folder]).trajectories
    capabilities = catalogue_for({t.source.benchmark for t in trajectories})
    count = len(trajectories)
    ingest = best_cpu_seconds(lambda: ingest_paths([folder]), args.repeats)
    label = best_cpu_seconds(lambda: label_deterministic(trajectories, capabilities), args.repeats)
    whole = best_cpu_seconds(lambda: diagnose(trajectories, [folder]), args.repeats)
    print(f"{count} airline trajectories, {len(capabilities)} capabilities, best of {args.repeats} (CPU seconds)")
    print(f"  ingestion                      {ingest:7.3f} s  {count / ingest:9.0f} traj/s")
    print(f"  deterministic labelling        {label:7.3f} s  {count / label:9.0f} traj/s")
    print(f"  labelling + contrast + select  {whole:7.3f} s  {count / whole:9.0f} traj/s")
    ratio = ingest / label
    print(
        f"labelling throughput / ingestion throughput = {ratio:.2f} (goal > {GOAL:.0f}: "
        f"{'met' if ratio > GOAL else 'NOT met'}); whole diagnosis / ingestion = {ingest / whole:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
