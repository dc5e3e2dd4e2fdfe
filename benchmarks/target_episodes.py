"""Held-out target episodes per second: the working tree's code against a commit's, same episodes.

Both play the same held-out tasks of the target (the hotel desk as configs/default.toml sizes it for
the loop: its [target] table, compact prompt and turn limits; its [rollout] turn budget, i.e. fitted
to the target as the loop's eval does) greedily (or sampled with a fixed seed: --temperature) with
the embedded model, through `tracegym.eval.play.play_target`, each in a child process: the working
tree's package, and BASE's rebuilt from git into a temporary folder
(`prequential_agreement.build_package`). Rounds alternate the two; the best of each side's rounds
is kept (wall-clock and process CPU time of the episodes, model loading excluded). Prints episodes
per second of each, their RATIO, and whether both played the same episodes (transcript and reward
of every task; a speedup that changes them is suspect, and a task whose guest message differs
means the target itself changed between the two).

Threads: 1 torch thread per child by default, as the loop plays its held-out arms (eval_workers
processes, each with an equal share of the cores: 1 with configs/default.toml on 2 cores). On a
2-core machine that other jobs share, 2 threads measure the OS scheduler more than the code: each
parallel region waits for the other thread's time slice.

    python benchmarks/target_episodes.py BASE [--tasks 7] [--rounds 2] [--threads 1] [--temperature 0]

Time: about 2 min with the defaults (a80b5d9 as BASE, on a shared 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "default.toml"
WORKER = """
import json, sys, time
from pathlib import Path
import torch
import tracegym
from tracegym.config import RolloutConfig, build_config, read_config_file
from tracegym.eval.play import play_target
from tracegym.eval.target import TargetConfig
from tracegym.eval.target.config import HELDOUT_BASE
from tracegym.generation import SamplingConfig
from tracegym.models import load_model
config_file, tasks, threads, temperature = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
torch.set_num_threads(threads)
settings = read_config_file(config_file)
target = build_config(TargetConfig, settings.get("target", {}), str(config_file), ("target",))
rollout = build_config(RolloutConfig, settings.get("rollout", {}), str(config_file), ("rollout",))
model, tokenizer = load_model()
params = SamplingConfig(max_new_tokens=rollout.max_new_tokens, temperature=temperature, seed=0)
seeds = list(range(HELDOUT_BASE, HELDOUT_BASE + tasks))
wall, cpu = time.perf_counter(), time.process_time()
records = play_target(model, tokenizer, target, seeds, 1, params, progress=False)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
episodes = [{"seed": r.task.seed, "reward": r.reward, "messages": [m.model_dump(mode="json") for m in r.messages]}
            for r in records]
print(json.dumps({"package": tracegym.__file__, "threads": torch.get_num_threads(), "wall": wall, "cpu": cpu,
                  "episodes": episodes}))
"""


def play(site: Path | None, tasks: int, threads: int, temperature: float) -> dict[str, Any]:
    """One child's episodes and timing: {"wall", "cpu" (seconds), "threads", "package", "episodes"};
    `site` None plays the working tree's package."""
    env = dict(os.environ, PYTHONPATH=str(site)) if site else dict(os.environ)
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(CONFIG), str(tasks), str(threads), str(temperature)],
        capture_output=True,
        text=True,
        env=env,
        cwd=site or REPO,
    )
    if done.returncode:
        raise RuntimeError(f"the episodes of {site or REPO} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = site if site else REPO
    if not Path(result["package"]).resolve().is_relative_to(expected.resolve()):
        raise RuntimeError(f"the child meant to run {expected} imported tracegym from {result['package']}")
    return result


def differences(base: list[dict[str, Any]], tree: list[dict[str, Any]]) -> str:
    """How the two sides' episodes compare, in one line."""
    changed_task = [b["seed"] for b, t in zip(base, tree) if b["messages"][:1] != t["messages"][:1]]
    changed_play = [
        b["seed"]
        for b, t in zip(base, tree)
        if b["seed"] not in changed_task and (b["messages"], b["reward"]) != (t["messages"], t["reward"])
    ]
    if not changed_task and not changed_play:
        return f"all {len(base)} identical (transcripts and rewards)"
    parts = []
    if changed_play:
        parts.append(f"{len(changed_play)} played differently from the same task (seeds {changed_play})")
    if changed_task:
        parts.append(
            f"{len(changed_task)} start from a different guest message: the target changed (seeds {changed_task})"
        )
    return f"{len(base) - len(changed_task) - len(changed_play)} of {len(base)} identical; " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from prequential_agreement import build_package, git

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the commit whose code is the baseline")
    parser.add_argument("--tasks", type=int, default=7, help="held-out tasks, one episode each (default 7)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds; best of each side kept (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each child (default 1)")
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="0: greedy (default); else sampled with seed 0 on both sides"
    )
    args = parser.parse_args(argv)
    try:
        base = git("rev-parse", "--verify", f"{args.base}^{{commit}}").strip()
    except subprocess.CalledProcessError:
        parser.error(f"{args.base!r} is not a commit of this repository")
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "tree": []}
    with tempfile.TemporaryDirectory() as scratch:
        site = build_package(base, Path(scratch))
        for _ in range(args.rounds):
            for side, folder in (("base", site), ("tree", None)):
                runs[side].append(play(folder, args.tasks, args.threads, args.temperature))
                print(f"  {side}: {runs[side][-1]['wall']:.1f} s wall", file=sys.stderr, flush=True)
    best = {
        side: {**results[0], "wall": min(r["wall"] for r in results), "cpu": min(r["cpu"] for r in results)}
        for side, results in runs.items()
    }
    episodes = len(best["tree"]["episodes"])
    decoding = "greedy" if args.temperature == 0 else f"sampled at temperature {args.temperature:g}, seed 0"
    print(
        f"{episodes} held-out target tasks ({CONFIG.relative_to(REPO)}: [target], [rollout] turn budget), {decoding}, "
        f"embedded model, {best['tree']['threads']} torch threads, best of {args.rounds} alternating rounds"
    )
    for side, name in (("base", f"base {base[:10]}"), ("tree", "working tree")):
        wall, cpu = best[side]["wall"], best[side]["cpu"]
        print(
            f"  {name:<17} {episodes / wall:.3f} episodes/s ({wall:.1f} s wall; {cpu:.1f} s CPU, "
            f"{cpu / episodes:.1f} core-s an episode)"
        )
    print(
        f"RATIO working tree / base: {best['base']['wall'] / best['tree']['wall']:.2f}x episodes/s "
        f"(CPU time: {best['base']['cpu'] / best['tree']['cpu']:.2f}x)"
    )
    print(f"{decoding.split(' ')[0]} episodes: {differences(best['base']['episodes'], best['tree']['episodes'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
