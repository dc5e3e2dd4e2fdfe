"""Continuous batching in `tracegym serve`: aggregate completion tokens/s of 8 concurrent requests
over that of one request alone, same server, same prompts and max_tokens, measured alternately in
the same run (goal on the embedded model, 2 CPU cores: >= 4x).

    python benchmarks/serve_load.py [--model smollm2-135m|tiny|PATH] [--concurrent 8]
                                    [--max-tokens 32] [--rounds 3] [--threads N]

Each round sends one request alone (the prompts in turn) and the `--concurrent` requests at once
(one prompt each), in alternating order; greedy, tokens counted from each reply's usage (a reply
may end before max_tokens). Rates include each request's prompt encoding and the HTTP round trip.
Prints per-request latencies of every round and the RATIO of the medians.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import time

import httpx
import torch

from tracegym.models import DEFAULT_MODEL
from tracegym.moe_router.config import ServeConfig
from tracegym.moe_router.server import RunningServer, create_app

TOPICS = [
    "a lighthouse",
    "a lost key",
    "a mountain town",
    "a night train",
    "a robot cook",
    "an old map",
    "a storm",
    "a garden",
]


def ask(url: str, prompt: str, max_tokens: int) -> tuple[float, int]:
    """(latency in seconds, completion tokens) of one greedy chat request."""
    body = {"model": "base", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
    started = time.perf_counter()
    response = httpx.post(url, json={**body, "temperature": 0}, timeout=600)
    response.raise_for_status()
    return time.perf_counter() - started, response.json()["usage"]["completion_tokens"]


def together(url: str, prompts: list[str], max_tokens: int) -> tuple[float, list[tuple[float, int]]]:
    """(wall seconds from the first send to the last reply, each request's (latency, tokens))."""
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        started = time.perf_counter()
        replies = list(pool.map(lambda prompt: ask(url, prompt, max_tokens), prompts))
    return time.perf_counter() - started, replies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"base model served (default {DEFAULT_MODEL}; tiny)")
    parser.add_argument("--concurrent", type=int, default=8, help="requests sent at once (default 8)")
    parser.add_argument("--max-tokens", type=int, default=32, help="max_tokens of every request (default 32)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    parser.add_argument(
        "--batch-wait-ms",
        type=float,
        default=ServeConfig.batch_wait_ms,
        help="how long an idle server waits for more requests to encode with the first (default %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = [f"Write a short story about {TOPICS[i % len(TOPICS)]}." for i in range(args.concurrent)]
    app, engine = create_app(
        args.model, ServeConfig(model_name="base", max_batch_size=args.concurrent, batch_wait_ms=args.batch_wait_ms)
    )
    alone_rates, together_rates = [], []
    with RunningServer(app) as running:
        url = f"{running.url}/v1/chat/completions"
        ask(url, prompts[0], 4)  # warm-up
        for round_index in range(args.rounds):
            order = ("alone", "together") if round_index % 2 == 0 else ("together", "alone")
            for kind in order:
                if kind == "alone":
                    latency, tokens = ask(url, prompts[round_index % len(prompts)], args.max_tokens)
                    alone_rates.append(tokens / latency)
                    print(f"round {round_index + 1} alone:    {tokens} tokens in {latency:.2f} s")
                else:
                    wall, replies = together(url, prompts, args.max_tokens)
                    tokens = sum(count for _, count in replies)
                    together_rates.append(tokens / wall)
                    latencies = " ".join(f"{latency:.2f}" for latency, _ in replies)
                    print(
                        f"round {round_index + 1} together: {tokens} tokens in {wall:.2f} s; latencies (s): {latencies}"
                    )
    alone, batched = statistics.median(alone_rates), statistics.median(together_rates)
    rows = engine.forward_rows / max(engine.forward_passes, 1)
    print(f"model {args.model}, {torch.get_num_threads()} torch threads; rows per forward pass: {rows:.2f}")
    print(f"one request alone:        {alone:7.1f} completion tokens/s (median of {args.rounds})")
    print(f"{args.concurrent} concurrent requests: {batched:7.1f} completion tokens/s (median of {args.rounds})")
    print(f"RATIO {args.concurrent} concurrent / alone: {batched / alone:.2f} (goal >= 4 on the embedded model)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
