"""A small learning-rate × steps sweep of GRPO on the embedded model, for GRPOConfig's defaults.

One family at its easiest rung, the short warm start of benchmarks/learning.py (its FULL settings),
then for each learning rate one plain-GRPO run (credit "grpo", training seed 0), scored on the
held-out seeds (greedy and sampled) after each step count in --checkpoints; paired differences
against the warm start per held-out seed (tracegym.stats.paired_difference). Writes sweep.json.

    python benchmarks/sweep.py [--family F] [--lrs 1e-5,1e-4,3e-4] [--checkpoints 2,4] [--heldout N]
                               [--sampled N] [--groups N] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from learning import FULL, easiest_spec, scored, trainer_from_warm_start, warm_start_scored

from tracegym.adapters.config import WarmStartConfig
from tracegym.adapters.grpo import read_log
from tracegym.adapters.heldout import compare
from tracegym.config import RolloutConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="precondition_verification")
    parser.add_argument("--lrs", default="1e-5,1e-4,3e-4", help="comma-separated GRPO learning rates")
    parser.add_argument("--checkpoints", default="2,4", help="comma-separated step counts at which to score held-out seeds")
    parser.add_argument("--heldout", type=int, default=FULL["heldout"], help=f"held-out seeds (default {FULL['heldout']})")
    parser.add_argument("--sampled", type=int, default=FULL["sampled"], help=f"sampled episodes per held-out seed (default {FULL['sampled']})")
    parser.add_argument("--groups", type=int, default=FULL["groups"], help=f"groups per GRPO step (default {FULL['groups']})")
    parser.add_argument("--out", type=Path, help="keep run folders and sweep.json here (default: a temporary folder)")
    args = parser.parse_args(argv)
    checkpoints = sorted(int(step) for step in args.checkpoints.split(","))
    settings = {**FULL, "steps": checkpoints[-1], "heldout": args.heldout, "sampled": args.sampled, "groups": args.groups}
    spec, rollout = easiest_spec(args.family), RolloutConfig(max_new_tokens=FULL["max_new_tokens"])
    with tempfile.TemporaryDirectory(prefix="tracegym-sweep-") as scratch:
        out = args.out or Path(scratch)
        warm, before = warm_start_scored(spec, settings, WarmStartConfig.learning_rate, out, rollout)
        print(f"{args.family} {spec.knobs}: warm start held-out {before.summary()['greedy_reward']['mean']:.3f} greedy, "
              f"{before.summary()['sampled_reward']['mean']:.3f} sampled", flush=True)
        rows = []
        for lr in (float(value) for value in args.lrs.split(",")):
            folder = out / f"lr_{lr:g}"
            trainer = trainer_from_warm_start(spec, settings, "grpo", 0, lr, out / "warm_start", folder, rollout)
            started = time.perf_counter()
            for step in checkpoints:
                trainer.train(progress=False, until=step)
                after = scored(folder / f"heldout_step{step}.json", trainer.policy, trainer.tokenizer, spec, settings, rollout)
                difference = compare(before, after)
                rows.append({"lr": lr, "steps": step, "after": after.summary(), "difference": difference,
                             "seconds": time.perf_counter() - started})
                print(f"lr {lr:g} step {step}: " + ", ".join(
                    f"{metric} {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" for metric, d in difference.items()
                    if metric.endswith("reward")), flush=True)
            rows[-1]["train_reward"] = [r["reward_mean"] for r in read_log(folder)]
        result = {"family": args.family, "knobs": spec.knobs, "settings": settings, "warm_start": warm,
                  "before": before.summary(), "runs": rows}
        (out / "sweep.json").write_text(json.dumps(result, indent=2))
        print(f"wrote {out / 'sweep.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
