"""Ingest throughput (trajectories per second, one core) as a ratio to plain `json.load` of the same files.

Runs on all of ../shared/data (τ² results + both SWE-bench runs), or on TRACEGYM_SHARED_DATA.
The baseline parses every JSON file the ingest reads, nothing more; ingest also reads the
OpenHands text logs and validates and converts every record. Goal: ratio >= 0.3.
Times are CPU seconds of this process (pinned to one core), so other load on the machine does not
skew the ratio; the two sides alternate `--repeats` times and each keeps its best. Ingest pauses
the cyclic garbage collector while it runs; the baseline is also shown with the collector off.

    python benchmarks/ingest.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from tracegym.analysis.ingest import ingest_paths

GOAL = 0.3


def data_root() -> Path:
    return Path(os.environ.get("TRACEGYM_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def run_sources(data: Path) -> tuple[list[Path], list[Path]]:
    """The run sources (τ² results folder, the two SWE-bench run folders) and the JSON files they hold."""
    tau2 = data / "tau2" / "results"
    mini = next((data / "swebench").glob("mini-swe-agent*/swebench_results/*"))
    openhands = next((data / "swebench").glob("openhands*/**/llm_completions")).parent
    files = sorted(tau2.glob("*/*.json"))
    files += sorted(mini.glob("trajs/*/*.traj.json")) + sorted(mini.glob("logs/*/report.json"))
    files += sorted(openhands.glob("llm_completions/*/*.json")) + [openhands / "metadata.json"]
    return [tau2, mini, openhands], files


def cpu_time(function: Callable[[], object], collector: bool = True) -> float:
    """CPU seconds of one call, with the cyclic garbage collector on or off."""
    if not collector:
        gc.disable()
    try:
        start = time.process_time()
        function()
        return time.process_time() - start
    finally:
        gc.enable()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions per side (best is kept)")
    args = parser.parse_args()
    data = data_root()
    if not (data / "tau2" / "results").is_dir():
        print(f"no real runs at {data}; set TRACEGYM_SHARED_DATA", file=sys.stderr)
        return 1
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    sources, files = run_sources(data)

    def parse_only() -> None:
        for file in files:
            with file.open(encoding="utf-8") as handle:
                json.load(handle)

    count = len(ingest_paths(sources).trajectories)
    megabytes = sum(f.stat().st_size for f in files) / 1e6
    times: dict[str, list[float]] = {"baseline": [], "baseline_nogc": [], "ingest": []}
    for _ in tqdm(range(args.repeats), desc="repeats", disable=None, leave=False):
        times["baseline"].append(cpu_time(parse_only))
        times["baseline_nogc"].append(cpu_time(parse_only, collector=False))
        times["ingest"].append(cpu_time(lambda: ingest_paths(sources)))
    baseline, baseline_nogc, ingest = (min(times[k]) for k in ("baseline", "baseline_nogc", "ingest"))
    ratio = baseline / ingest
    print(f"{count} trajectories from {len(files)} JSON files ({megabytes:.1f} MB), one core, best of {args.repeats}")
    print(f"json.load baseline:            {baseline:.3f} s CPU = {count / baseline:,.0f} trajectories/s")
    print(f"json.load baseline, no GC:     {baseline_nogc:.3f} s CPU = {count / baseline_nogc:,.0f} trajectories/s")
    print(f"ingest_paths:                  {ingest:.3f} s CPU = {count / ingest:,.0f} trajectories/s")
    print(f"ratio ingest / json.load: {ratio:.2f} (goal >= {GOAL}) -> {'PASS' if ratio >= GOAL else 'FAIL'}")
    print(f"ratio ingest / json.load without GC: {baseline_nogc / ingest:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
