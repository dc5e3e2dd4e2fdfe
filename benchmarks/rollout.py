"""Rollout engine throughput against plain batched `model.generate` of the same model.

The rollout engine (tracegym.rollout.run_episodes with the hf backend) plays episodes of a
synthetic environment with the embedded model. The baseline replays every turn's batch of contexts
through plain `model.generate` (no scores, no log-probs, no environment, no bookkeeping) with the
same batch composition, sampling settings and seeds, so it samples the same tokens and lengths.
Prints sampled tokens per second of both and their ratio (goal >= 0.8).

    python benchmarks/rollout.py [--quick] [--family multi_step_task_completion]
"""

from __future__ import annotations

import argparse
import time

import torch

from tracegym.generation import HFBackend, SamplingParams
from tracegym.models import load_model
from tracegym.rollout import Episode, run_episodes, turn_params
from tracegym.synth_envs.registry import make_env


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
def plain_generate(model, tokenizer, contexts: list[list[int]], params: SamplingParams, batch_size: int) -> int:
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
    args = parser.parse_args()
    seeds, rollouts, new_tokens = ([0, 1], 2, 32) if args.quick else ([0, 1, 2, 3, 4, 5, 6, 7], 2, 64)
    batch_size = len(seeds) * rollouts
    model, tokenizer = load_model()
    backend = HFBackend(model, tokenizer, batch_size=batch_size)
    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.7, seed=11)
    run_episodes(backend, lambda: make_env(args.family), seeds[:1], 1, SamplingParams(max_new_tokens=4))  # warm-up

    start = time.perf_counter()
    episodes = run_episodes(backend, lambda: make_env(args.family), seeds, rollouts, params)
    engine_s = time.perf_counter() - start
    engine_tokens = sum(sum(e.loss_mask) for e in episodes)

    start = time.perf_counter()
    plain_tokens = sum(
        plain_generate(model, tokenizer, contexts, turn_params(params, k), batch_size)
        for k, contexts in enumerate(turn_contexts(episodes))
    )
    plain_s = time.perf_counter() - start

    turns = sum(max(e.turn_ids) + 1 for e in episodes)
    print(f"{args.family}: {len(episodes)} episodes, {turns} turns, batch {batch_size}, "
          f"<= {new_tokens} new tokens per turn, {torch.get_num_threads()} threads")
    print(f"rollout engine: {engine_tokens} tokens in {engine_s:.1f} s = {engine_tokens / engine_s:.1f} tok/s")
    print(f"plain generate: {plain_tokens} tokens in {plain_s:.1f} s = {plain_tokens / plain_s:.1f} tok/s")
    ratio = (engine_tokens / engine_s) / (plain_tokens / plain_s)
    print(f"throughput ratio engine/plain generate: {ratio:.2f} (goal >= 0.8)")


if __name__ == "__main__":
    main()
