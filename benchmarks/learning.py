"""Does TRACE turn credit learn faster than plain GRPO at an equal rollout budget?

Warm start (SFT on oracle dialogues) once, then for each credit ("trace", "grpo") and each training
seed: GRPO from the warm start for `steps` steps of `groups × group_size` rollouts, and the
held-out reward (unhinted, T = 0.7, eval seeds) before and after. Prints the held-out reward after
training as a RATIO to the warm start's (measured in the same run), per credit, and trace's
held-out reward as a ratio to plain GRPO's, with 95% intervals.

    python benchmarks/learning.py --out DIR  # embedded SmolLM2-135M on CPU (see cost below)
    python benchmarks/learning.py --quick    # 2-step smoke on the tiny random model (seconds)

Cost. The tool families' dialogues are ~750 tokens (the policy and tool schemas make up most of
the system prompt), so on CPU every step is dominated by forward/backward passes over them:
measured on this project's 2-core machine (~20 GFLOPS under load), one SmolLM2 forward+backward
over 2 × 750 tokens takes 105-150 s, so the default sizes below (8 SFT steps, 3 seeds × 2 credits
× 2 GRPO steps of 4 rollouts) need well over an hour there; a GPU takes minutes. With `--out` the
run is resumable: a finished warm start is reused and each GRPO run resumes from its checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import stats

from tracegym.adapters.config import CreditConfig, GRPOConfig, WarmStartConfig
from tracegym.adapters.grpo import GRPOTrainer, read_log
from tracegym.adapters.heldout import score_heldout
from tracegym.adapters.lora import attach_lora
from tracegym.adapters.sft import warm_start
from tracegym.adapters.train import env_factory_for, load_base
from tracegym.config import DEFAULT_MODEL, TINY_MODEL, RolloutConfig
from tracegym.schema import EnvSpec

FULL = dict(model=DEFAULT_MODEL, sft_steps=8, sft_batch=2, steps=2, groups=1, group_size=4, heldout=12, max_new_tokens=None, seeds=3)
QUICK = dict(model=TINY_MODEL, sft_steps=1, sft_batch=2, steps=2, groups=1, group_size=2, heldout=2, max_new_tokens=8, seeds=1)


def interval_over_runs(values: list[float]) -> dict[str, float]:
    """Mean and 95% Student-t interval over independent training runs."""
    array = np.asarray(values, dtype=np.float64)
    half = stats.t.ppf(0.975, len(array) - 1) * array.std(ddof=1) / math.sqrt(len(array)) if len(array) > 1 else 0.0
    return {"mean": float(array.mean()), "low": float(array.mean() - half), "high": float(array.mean() + half), "n": len(array)}


def run(args: argparse.Namespace, out: Path) -> dict:
    settings = QUICK if args.quick else FULL
    knobs = json.loads(args.knobs)
    spec = EnvSpec(capability=args.family, family=args.family, knobs=knobs)
    factory = env_factory_for(spec)
    base, tokenizer = load_base(settings["model"])
    warm = WarmStartConfig(dialogues=settings["sft_steps"] * settings["sft_batch"], steps=settings["sft_steps"],
                           batch_size=settings["sft_batch"], learning_rate=args.sft_lr)
    started = time.perf_counter()
    warm_file = out / "warm_start" / "warm_start.json"
    if warm_file.is_file():
        warm_model, warm_metrics = attach_lora(base, adapter_dir=out / "warm_start"), json.loads(warm_file.read_text())
    else:
        warm_model, warm_metrics = warm_start(base, tokenizer, [factory], range(50_000, 50_000 + warm.dialogues), warm, out / "warm_start")
        warm_file.write_text(json.dumps(warm_metrics))
    warm_seconds = time.perf_counter() - started
    eval_seeds = range(spec.eval_seeds[0], spec.eval_seeds[0] + settings["heldout"])
    rollout = RolloutConfig(max_new_tokens=settings["max_new_tokens"])
    evaluation = RolloutConfig(temperature=0.7, max_new_tokens=settings["max_new_tokens"])
    evaluate = lambda model: score_heldout(model, tokenizer, factory, eval_seeds, evaluation, sampled=1).summary()["sampled_reward"]  # noqa: E731
    before = evaluate(warm_model)
    print(f"warm start: {warm_metrics['first_loss']:.3f} -> {warm_metrics['final_loss']:.4f} loss in {warm_seconds:.0f} s; "
          f"held-out reward {before['mean']:.3f} [{before['low']:.3f}, {before['high']:.3f}]", flush=True)
    runs = []
    for credit in ("trace", "grpo"):
        for seed in range(settings["seeds"]):
            model, _ = load_base(settings["model"])
            policy = attach_lora(model, adapter_dir=out / "warm_start")
            config = GRPOConfig(steps=settings["steps"], groups_per_step=settings["groups"], group_size=settings["group_size"],
                                learning_rate=args.lr, mini_batches=2, hint_fraction=0.25, credit=CreditConfig(credit=credit),
                                seed=seed, save_every=settings["steps"])
            trainer = GRPOTrainer(policy, tokenizer, factory, config, rollout, out / f"{credit}_{seed}", train_seeds=spec.train_seeds)
            trainer.resume()
            started = time.perf_counter()
            trainer.train(progress=not args.quick)
            records = read_log(out / f"{credit}_{seed}")
            after = evaluate(trainer.policy)
            runs.append({"credit": credit, "seed": seed, "after": after, "seconds": time.perf_counter() - started,
                         "train_reward": [r["reward_mean"] for r in records], "kept_groups": [r["kept_groups"] for r in records]})
            print(f"{credit} seed {seed}: held-out {after['mean']:.3f} (train reward per step "
                  f"{', '.join(f'{r:.2f}' for r in runs[-1]['train_reward'])}; kept groups {runs[-1]['kept_groups']})", flush=True)
    summary = {credit: interval_over_runs([r["after"]["mean"] for r in runs if r["credit"] == credit]) for credit in ("trace", "grpo")}
    return {"family": args.family, "knobs": knobs, "settings": settings, "lr": args.lr, "warm_start": warm_metrics,
            "before": before, "runs": runs, "after": summary,
            "rollouts_per_run": settings["steps"] * settings["groups"] * settings["group_size"]}


def report(result: dict) -> None:
    before, after = result["before"]["mean"], result["after"]
    print(f"\n{result['family']} {result['knobs']}: {result['rollouts_per_run']} rollouts per run, "
          f"{after['trace']['n']} seeds per credit, lr {result['lr']}")
    print(f"held-out reward before (warm start): {before:.3f} [{result['before']['low']:.3f}, {result['before']['high']:.3f}]")
    for credit in ("trace", "grpo"):
        a = after[credit]
        ratio = a["mean"] / before if before else float("nan")
        print(f"{credit:5s} after: {a['mean']:.3f} [{a['low']:.3f}, {a['high']:.3f}]   ratio to warm start {ratio:.3f}")
    ratio = after["trace"]["mean"] / after["grpo"]["mean"] if after["grpo"]["mean"] else float("nan")
    print(f"RATIO trace / plain GRPO held-out reward after equal rollouts: {ratio:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2-step smoke on the tiny model")
    parser.add_argument("--family", default="precondition_verification")
    parser.add_argument("--knobs", default='{"n_orders": 2, "max_conditions": 1}', help="difficulty knobs (JSON)")
    parser.add_argument("--lr", type=float, default=2e-4, help="GRPO learning rate (default 2e-4)")
    parser.add_argument("--sft-lr", type=float, default=1e-3, help="warm-start learning rate")
    parser.add_argument("--out", type=Path, help="keep run folders and result.json here (default: a temporary folder)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tracegym-learning-") as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        result = run(args, out)
        (out / "result.json").write_text(json.dumps(result, indent=2))
        report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
