"""Episodes generated and verified per second, per environment family, as a ratio to the goal.

One episode = `reset(seed)` on a seed never seen by the process (generation, the family's own
checks, and the oracle checks: oracle play scored 1.0, every wrong trajectory scored below 1)
plus playing the oracle through `step` and scoring it. Goals (issue 4): 1,000/s for the tool
families, 50/s for causal diagnosis, 5/s for code repair. Also printed, measured in the same run:
generation alone (`_generate` on fresh seeds) and a JSON round trip of the oracle dialogue, the
floor cost of merely serialising an episode, and the share of generation attempts the checks
rejected (regenerated from the next derived seed). Each measurement starts after one untimed
episode, so imports and one-off setup (DuckDB, the sandbox probe) are not counted.

Then the degenerate-policy table (issue 12): the mean reward of each policy of
`tracegym.synth_envs.degenerate` per family at default knobs over `--degenerate-seeds` seeds
(default 200), beside the calibration band's low end it must stay under (their ratio in the
last column: below 1.00x holds).

    python benchmarks/envs.py [--quick] [--workers N] [--seconds S] [--degenerate-seeds N]

`--workers N` runs N processes on disjoint seeds and reports their summed rate (episodes are
independent, so generation parallelises across cores); the default is one process.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time

from tracegym.synth_envs.base import play
from tracegym.synth_envs.calibration import CalibrationConfig
from tracegym.synth_envs.degenerate import degenerate_means
from tracegym.synth_envs.registry import families, make_env

GOALS = {"causal_diagnosis": 50.0, "code_repair": 5.0}
TOOL_GOAL = 1_000.0


def _rate(family: str, start: int, seconds: float, what: str) -> tuple[int, float, int]:
    """Episodes of `what` ("full", "generate", "json") done on fresh seeds within `seconds`,
    the time taken, and the generation attempts they needed (rejected ones included)."""
    env = make_env(family)
    # one untimed episode first: the family's imports and one-off setup (DuckDB, the sandbox probe)
    # would otherwise fall inside the first family's timed window; its dialogue is what "json" times
    dialogue = play(env, start - 1, env.oracle(start - 1))[0]
    done, seed, attempts, began = 0, start, 0, time.perf_counter()
    while time.perf_counter() - began < seconds or done < 3:
        if what == "full":
            env.reset(seed)
            attempts += env.attempts
            _, result = play(env, seed, env.oracle(seed))
            if result.reward != 1.0:
                raise AssertionError(f"{family} seed {seed}: oracle earned {result.reward}")
        elif what == "generate":
            env._generate(seed)
        else:
            json.loads(json.dumps([m.model_dump() for m in dialogue]))
        done, seed = done + 1, seed + 1
    return done, time.perf_counter() - began, attempts


def _worker(job: tuple[str, int, float, str]) -> tuple[int, float, int]:
    return _rate(*job)


def measure(family: str, seconds: float, workers: int, what: str, base: int) -> tuple[float, float]:
    """Episodes per second (summed over workers) and the share of generation attempts rejected."""
    if workers == 1:
        results = [_rate(family, base, seconds, what)]
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            results = pool.map(_worker, [(family, base + w * 10_000_000, seconds, what) for w in range(workers)])
    done, attempts = sum(r[0] for r in results), sum(r[2] for r in results)
    return sum(r[0] / r[1] for r in results), (1 - done / attempts if attempts else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 s per measurement instead of 3 s")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--degenerate-seeds", type=int, default=200, help="seeds per family and policy (0: skip the table)"
    )
    args = parser.parse_args()
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    print(
        f"{'family':28s} {'verified/s':>11s} {'goal':>7s} {'ratio':>7s} {'rejected':>9s} "
        f"{'gen only/s':>11s} {'json rt/s':>10s}"
        f"  (workers={args.workers})"
    )
    for index, family in enumerate(families()):
        base = 50_000_000 + index * 1_000_000_000
        full, rejected = measure(family, seconds, args.workers, "full", base)
        generate, _ = measure(family, seconds / 2, args.workers, "generate", base + 500_000_000)
        round_trip, _ = measure(family, seconds / 2, 1, "json", base)
        goal = GOALS.get(family, TOOL_GOAL)
        print(
            f"{family:28s} {full:11.1f} {goal:7.0f} {full / goal:6.2f}x {rejected:9.1%} "
            f"{generate:11.1f} {round_trip:10.1f}"
        )
    if args.degenerate_seeds:
        degenerate_table(args.degenerate_seeds)


def degenerate_table(seeds: int) -> None:
    """Mean reward of each degenerate policy per family, and the worst one against the band's low end."""
    band = CalibrationConfig().low
    rows = {family: degenerate_means(family, {}, range(seeds)) for family in families()}
    names = list(next(iter(rows.values())))
    print(f"\ndegenerate policies: mean reward over {seeds} seeds at default knobs (band starts at {band})")
    print(f"{'family':28s} " + " ".join(f"{name:>21s}" for name in names) + f" {'worst/band':>11s}")
    for family, means in rows.items():
        print(
            f"{family:28s} "
            + " ".join(f"{means[name]:21.3f}" for name in names)
            + f" {max(means.values()) / band:10.2f}x"
        )


if __name__ == "__main__":
    main()
