"""Rollouts through `tracegym serve` (a subprocess, N turns in flight; tracegym.served_rollout)
against the in-process engine (tracegym.rollout, one batch of every live episode per turn), on the
same episodes: one family, the same seeds and rollouts per seed, the same turn budget and
temperature. Each side is warmed up on one short episode, then the two alternate for `--rounds`
rounds (the best wall-clock time of each kept: other jobs on the machine hit both alike); prints
episodes per second of each and their ratio (served / in-process), with the tokens each sampled
(sampled rollouts differ between the two: each engine samples its own way; greedy ones,
`--temperature 0`, are the same episodes, and the count of token-identical ones is printed).

    python benchmarks/served_rollouts.py [--model tiny|smollm2-135m] [--family F] [--seeds 8]
        [--rollouts 2] [--max-new-tokens 32] [--in-flight 16] [--max-batch-size 8] [--rounds 2] [--threads N]
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from tracegym.adapters.train import load_base
from tracegym.generation import HFBackend, SamplingConfig
from tracegym.rollout import Episode, run_episodes
from tracegym.served_rollout import PolicyServer, run_served_episodes
from tracegym.synth_envs.registry import make_env

URL = re.compile(r"on (http://\S+)/v1 ")


def start_server(model: str, max_batch_size: int, threads: int | None) -> tuple[subprocess.Popen, str]:
    """`tracegym serve MODEL` on a free port (with `threads` torch threads: OMP_NUM_THREADS); returns
    the process and its base URL."""
    command = [sys.executable, "-m", "tracegym.cli", "serve", model, "--port", "0", "--model-name", "base"]
    command += ["--max-batch-size", str(max_batch_size), "--max-queue", "1024"]
    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert process.stdout is not None
    for line in process.stdout:
        found = URL.search(line)
        if found:
            return process, found.group(1)
    raise RuntimeError(f"tracegym serve {model} exited with {process.wait()} before serving")


def timed(play: Callable[[], list[Episode]], best: float) -> tuple[list[Episode], float]:
    """`play()`'s episodes and the shorter of its wall-clock seconds and `best`."""
    started = time.perf_counter()
    episodes = play()
    return episodes, min(best, time.perf_counter() - started)


def describe(name: str, episodes: list[Episode], seconds: float) -> float:
    rate = len(episodes) / seconds
    turns = sum(e.num_actions + 1 for e in episodes)
    tokens = sum(sum(e.loss_mask) for e in episodes)
    print(f"{name}: {seconds:.1f} s, {rate:.2f} episodes/s; {turns} turns, {tokens} tokens sampled")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny (default) or smollm2-135m, a folder, a hub id")
    parser.add_argument("--family", default="multi_step_task_completion")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=2, help="rollouts per seed")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--in-flight", type=int, default=16, help="served turns requested at once")
    parser.add_argument("--max-batch-size", type=int, default=8, help="the server's --max-batch-size")
    parser.add_argument("--rounds", type=int, default=2, help="alternating timing rounds, best of each kept")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads of each side (default: torch's choice; 1 where other jobs share the cores: two threads "
        "on two busy cores can run the in-process engine tens of times slower)",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    env = functools.partial(make_env, args.family)
    seeds = list(range(args.seeds))
    params = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=0)
    model, tokenizer = load_base(args.model)
    backend = HFBackend(model, tokenizer, batch_size=len(seeds) * args.rollouts)
    process, url = start_server(args.model, args.max_batch_size, args.threads)
    try:
        server = PolicyServer(url, "base", timeout=600)
        warm = SamplingConfig(max_new_tokens=2, temperature=args.temperature)
        run_episodes(backend, env, [seeds[0]], 1, warm)
        run_served_episodes(server, tokenizer, env, [seeds[0]], 1, warm, 1)
        local_s = served_s = float("inf")
        for _ in range(args.rounds):
            local, local_s = timed(lambda: run_episodes(backend, env, seeds, args.rollouts, params), local_s)
            served, served_s = timed(
                lambda: run_served_episodes(server, tokenizer, env, seeds, args.rollouts, params, args.in_flight),
                served_s,
            )
    finally:
        process.terminate()
        process.wait(30)
    print(
        f"{args.model}, {args.family}: {len(seeds)} seeds x {args.rollouts} rollouts, {args.max_new_tokens} tokens a "
        f"turn at most, T={args.temperature}; server: {args.in_flight} in flight, batches of {args.max_batch_size}; "
        f"{torch.get_num_threads()} torch threads a side, best of {args.rounds} rounds"
    )
    local_rate = describe("in-process", local, local_s)
    served_rate = describe(f"served ({args.in_flight} in flight)", served, served_s)
    mismatched = sum(e.info["context_mismatch_turns"] for e in served)
    print(f"served turns whose prompt differed from the trainer's context: {mismatched}")
    same = sum(a.completion_ids == b.completion_ids for a, b in zip(served, local))
    print(f"served episodes token-identical to the in-process ones: {same}/{len(local)} (all, greedy: --temperature 0)")
    print(f"RATIO served / in-process episodes per second: {served_rate / local_rate:.2f}x")


if __name__ == "__main__":
    main()
