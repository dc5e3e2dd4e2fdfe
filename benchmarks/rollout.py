"""Rollout engine throughput against plain batched `model.generate` of the same model.

The rollout engine (tracegym.rollout.run_episodes with the hf backend) plays episodes of a
synthetic environment with the embedded model. The baseline replays every turn's batch of contexts
through plain `model.generate` (no scores, no log-probs, no environment, no bookkeeping) with the
same batch composition, sampling settings and seeds, so it samples the same tokens and lengths.
Both are timed in alternating rounds (best of each kept), in wall-clock and in process CPU time.
Prints sampled tokens per second of both and their ratio (goal >= 0.8).

    python benchmarks/rollout.py [--quick] [--family multi_step_task_completion]
"""

from __future__ import annotations

import argparse
import time

import torch

from tracegym.generation import HFBackend, SamplingConfig
from tracegym.models import load_model
from tracegym.rollout import Episode, run_episodes, turn_params
from tracegym.synth_envs.registry import make_env


class _Clock:
    """Best wall-clock and process-CPU seconds over the `with` blocks it timed (CPU time is the
    steadier figure when other jobs share the cores)."""

    def __init__(self) -> None:
        self.wall, self.cpu = float("inf"), float("inf")

    def __enter__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def __exit__(self, *exc: object) -> None:
        self.wall = min(self.wall, time.perf_counter() - self._wall)
        self.cpu = min(self.cpu, time.process_time() - self._cpu)


def turn_contexts(episodes: list[Episode]) -> list[list[list[int]]]:
    """For each turn, the contexts the engine fed the backend (episodes still live, in order)."""
    turns: list[list[list[int]]] = []
    for episode in episodes:
        for k in range(max(episode.turn_ids) + 1):
            start = episode.turn_ids.index(k)
            if len(turns) <= k:
                turns.append([])
            turns[k].append(episode.prompt_ids + episode.completion_ids[:start])
    return turns


@torch.inference_mode()
def plain_generate(model, tokenizer, contexts: list[list[int]], params: SamplingConfig, batch_size: int) -> int:
    """Sample with bare `model.generate` in the backend's batches; returns tokens sampled (through eos)."""
    torch.manual_seed(params.seed)
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    order = sorted(range(len(contexts)), key=lambda i: len(contexts[i]))
    sampled = 0
    for begin in range(0, len(order), batch_size):
        batch = [contexts[i] for i in order[begin : begin + batch_size]]
        width = max(map(len, batch))
        ids = torch.tensor([[pad] * (width - len(c)) + c for c in batch])
        mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in batch])
        out = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=params.max_new_tokens, do_sample=True,
            temperature=params.temperature, top_p=params.top_p, top_k=None, pad_token_id=pad, eos_token_id=eos,
        )
        for row in out[:, width:].tolist():
            sampled += row.index(eos) + 1 if eos in row else len(row)
    return sampled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds x 2 rollouts, 32 new tokens per turn")
    parser.add_argument("--family", default="multi_step_task_completion")
    parser.add_argument("--rounds", type=int, default=2, help="alternating timing rounds; best of each is kept (default 2)")
    args = parser.parse_args()
    seeds, rollouts, new_tokens = ([0, 1], 2, 32) if args.quick else ([0, 1, 2, 3, 4, 5, 6, 7], 2, 64)
    batch_size = len(seeds) * rollouts
    model, tokenizer = load_model()
    backend = HFBackend(model, tokenizer, batch_size=batch_size)
    params = SamplingConfig(max_new_tokens=new_tokens, temperature=0.7, seed=11)
    run_episodes(backend, lambda: make_env(args.family), seeds[:1], 1, SamplingConfig(max_new_tokens=4))  # warm-up

    engine, plain = _Clock(), _Clock()
    for _ in range(args.rounds):  # alternate, keep the best of each: load on the machine hits both alike
        with engine:
            episodes = run_episodes(backend, lambda: make_env(args.family), seeds, rollouts, params)
        with plain:
            plain_tokens = sum(
                plain_generate(model, tokenizer, contexts, turn_params(params, k), batch_size)
                for k, contexts in enumerate(turn_contexts(episodes))
            )
    engine_tokens = sum(sum(e.loss_mask) for e in episodes)

    turns = sum(max(e.turn_ids) + 1 for e in episodes)
    print(f"{args.family}: {len(episodes)} episodes, {turns} turns, batch {batch_size}, "
          f"<= {new_tokens} new tokens per turn, {torch.get_num_threads()} threads, best of {args.rounds} rounds")
    for name, clock, tokens in (("rollout engine", engine, engine_tokens), ("plain generate", plain, plain_tokens)):
        print(f"{name}: {tokens} tokens in {clock.wall:.1f} s wall = {tokens / clock.wall:.1f} tok/s; "
              f"{clock.cpu:.1f} s CPU = {tokens / clock.cpu:.1f} tok/CPU-s")
    wall_ratio = (engine_tokens / engine.wall) / (plain_tokens / plain.wall)
    cpu_ratio = (engine_tokens / engine.cpu) / (plain_tokens / plain.cpu)
    print(f"throughput ratio engine/plain generate: {wall_ratio:.2f} wall, {cpu_ratio:.2f} CPU time (goal >= 0.8)")

if __name__ == "__main__":
    main()
