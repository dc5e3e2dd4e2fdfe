"""GRPO step time of two processes against one, on the same groups: `groups` GRPO groups of
`group_size` four-turn episodes (benchmarks/four_turn_env.py: it measures the engine, not skill),
turns ending at a newline or `max_new_tokens`, trace credit, LoRA rank 16, one optimizer step. Two
processes each roll out and score half the groups and all-reduce the gradient
(`accelerate launch --multi_gpu --num_processes 2`: gloo on the CPU, a GPU each where there are two).

Each run is a fresh launch of this script as a worker: one untimed step (one-off costs), then
`steps` timed steps from the same seeds, weights and sampling seeds in both runs, so both train on
the same groups (a fingerprint of every episode's tokens checks it). Runs alternate one process, two
processes, `rounds` times; each side keeps its best mean step time (load on the machine hits both
alike), and the ratio one/two is the speed-up. `--threads` torch threads a process (default 1: the
two-process run has twice the cores or GPUs of the one-process run, as when adding a GPU).

    python benchmarks/two_processes.py [--model NAME] [--rounds 3] [--steps 2] [--groups 4]
        [--group-size 4] [--max-new-tokens 16] [--threads 1] [--cpu]

`--model tiny` (the random test model, its output layer biased towards <|im_end|> so that it ends
its turns, about one token in seven) is a smoke run of the machinery; the default is the embedded model.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tracegym.config import DEFAULT_MODEL

STOP = ("\n",)
WORKER_FLAG = "--worker"
END_OF_TURN_BIAS = 9.0  # on the tiny model's <|im_end|> logit: about one token in seven ends the turn


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="`tiny`, the embedded model (default), a dir or hub id")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of both runs (default 3)")
    parser.add_argument("--steps", type=int, default=2, help="timed GRPO steps a run, after one untimed (default 2)")
    parser.add_argument("--groups", type=int, default=4, help="GRPO groups a step, even (default 4)")
    parser.add_argument("--group-size", type=int, default=4, help="episodes a group (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="tokens a turn at most (default 16)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads a process (default 1)")
    parser.add_argument("--cpu", action="store_true", help="hide the GPUs: both runs on the CPU")
    parser.add_argument(WORKER_FLAG, type=Path, help=argparse.SUPPRESS)  # internal: a run's result file
    args = parser.parse_args(argv)
    if args.groups % 2:
        parser.error("--groups must be even: two processes take half each")
    return args


# -- a run (one process, or each of two) -------------------------------------------------------


def ending_turns(model: Any, eos_token_id: int) -> Any:
    """The random tiny model with an untied output layer biased towards `eos_token_id`: without it
    every turn runs into the token budget, which ends the episode with reward 0 (no group to train)."""
    import torch

    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[eos_token_id] = END_OF_TURN_BIAS
    model.lm_head = head
    model.config.tie_word_embeddings = False
    return model


def worker(args: argparse.Namespace) -> None:
    """One untimed step, then `args.steps` timed ones; the main process writes the mean step time,
    its rollout and update parts (s) and the fingerprint of every process's episodes to `args.worker`."""
    import torch
    from accelerate.utils import gather_object
    from four_turn_env import four_turn_env

    from tracegym.adapters import grpo
    from tracegym.adapters.config import CreditConfig, TurnGRPOConfig
    from tracegym.adapters.grpo import TurnGRPOTrainer
    from tracegym.adapters.lora import attach_lora
    from tracegym.adapters.train import load_base
    from tracegym.config import TINY_MODEL, RolloutConfig
    from tracegym.generation import SamplingConfig

    torch.set_num_threads(args.threads)
    # the untrained policy rambles until the token budget; a newline ends a turn as in benchmarks/grpo_step.py
    grpo.SamplingConfig = functools.partial(SamplingConfig, stop=STOP)  # type: ignore[attr-defined]
    config = TurnGRPOConfig(
        steps=args.steps + 1,
        groups_per_step=args.groups,
        group_size=args.group_size,
        micro_batch_size=2,
        max_redraws=0,  # redraws would take other seeds in each run
        hint_fraction=0.25,
        lora_rank=16,
        credit=CreditConfig(credit="trace"),
    )
    model, tokenizer = load_base(args.model)
    if args.model == TINY_MODEL:
        model = ending_turns(model, tokenizer.eos_token_id)
    policy = attach_lora(model, rank=config.lora_rank, seed=config.seed)
    rollout = RolloutConfig(temperature=1.0, max_new_tokens=args.max_new_tokens)
    with tempfile.TemporaryDirectory(prefix="two_processes_") as out:
        trainer = TurnGRPOTrainer(policy, tokenizer, four_turn_env, config, rollout, out)
        trainer.train_step()
        played: list[tuple[int, int, bool, tuple[int, ...]]] = []
        rollouts = trainer.rollouts

        def recorded(seeds: list[int]) -> Any:
            episodes = rollouts(seeds)
            played.extend((trainer.step, e.seed, e.hinted, tuple(e.completion_ids)) for e in episodes)
            return episodes

        trainer.rollouts = recorded
        records = [trainer.train_step() for _ in range(args.steps)]
    every = sorted(gather_object(played))
    if trainer.accelerator.is_main_process:
        result = {
            key: sum(r[f"{key}_seconds"] for r in records) / len(records) for key in ("step", "rollout", "update")
        }
        result["processes"] = trainer.accelerator.num_processes
        result["device"] = str(trainer.accelerator.device)
        result["kept_groups"] = sum(r["kept_groups"] for r in records)
        result["train_tokens"] = sum(r["train_tokens"] for r in records)
        result["episodes"] = len(every)
        result["fingerprint"] = hashlib.sha256(repr(every).encode()).hexdigest()[:16]
        args.worker.write_text(json.dumps(result))


# -- the comparison ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(processes: int, args: argparse.Namespace, result: Path) -> dict[str, Any]:
    """Launch one run of `processes` processes and return its result."""
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    if args.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    command = [sys.executable]
    if processes > 1:
        command += ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes)]
        command += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
        command += ["--main_process_port", str(_free_port())]
    command += [str(Path(__file__).resolve()), *sys.argv[1:], WORKER_FLAG, str(result)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the {processes}-process run failed:\n{done.stderr[-3000:]}")
    return json.loads(result.read_text())


def main() -> None:
    args = arguments()
    if args.worker is not None:
        worker(args)
        return
    best: dict[int, dict[str, Any]] = {}
    fingerprints: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="two_processes_") as scratch:
        for round_index in range(args.rounds):
            for processes in (1, 2):
                result = run(processes, args, Path(scratch) / f"{round_index}-{processes}.json")
                fingerprints.add(result["fingerprint"])
                print(
                    f"round {round_index + 1}, {processes} process(es) on {result['device']}: "
                    f"{result['step']:.2f} s a step (rollouts {result['rollout']:.2f} s, "
                    f"credit and update {result['update']:.2f} s)",
                    flush=True,
                )
                if processes not in best or result["step"] < best[processes]["step"]:
                    best[processes] = result
    one, two = best[1], best[2]
    print(
        f"GRPO step, {args.model}, {args.groups} groups of {args.group_size} four-turn episodes, "
        f"{one['episodes'] // args.steps} episodes, {one['kept_groups'] / args.steps:g} groups kept and "
        f"{one['train_tokens'] / args.steps:.0f} trained tokens a step, "
        f"{args.threads} thread(s) a process, best of {args.rounds} alternating rounds of {args.steps} steps"
    )
    print(f"same groups in every run: {'yes' if len(fingerprints) == 1 else 'NO'} ({len(fingerprints)} fingerprint(s))")
    print(f"one process: {one['step']:.2f} s a step; two processes: {two['step']:.2f} s a step")
    print(f"speed-up one/two processes: {one['step'] / two['step']:.2f}x (ideal 2x)")


if __name__ == "__main__":
    main()
