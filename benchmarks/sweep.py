"""A small learning-rate × steps sweep of GRPO on the embedded model, for TurnGRPOConfig's defaults.

One family at its easiest rung, the short warm start of benchmarks/learning.py (its FULL settings),
then for each learning rate one plain-GRPO run (credit "grpo", training seed 0), scored on
validation seeds (greedy and sampled) after each step count in --checkpoints; paired differences
against the warm start per seed (tracegym.stats.paired_difference). Writes sweep.json.

The validation seeds start --validation-offset (default 100) past the first held-out seed, so they
are disjoint from the held-out seeds learning.py reports on (its first --heldout, 32 by default):
a rate chosen here is not chosen on the seeds that then judge it.

    python benchmarks/sweep.py [--quick] [--family F] [--lrs 3e-5,1e-4,3e-4,1e-3] [--checkpoints 3,6,12]
                               [--heldout N] [--sampled N] [--groups N] [--validation-offset N] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from learning import FULL, QUICK, rollout_config, rung_spec, scored, trainer_from_warm_start, warm_start_scored

from tracegym.adapters.config import WarmStartConfig
from tracegym.adapters.grpo import read_log
from tracegym.adapters.heldout import compare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="seconds-long smoke on the tiny random model (learning.py's QUICK)"
    )
    parser.add_argument("--family", default="precondition_verification")
    parser.add_argument("--lrs", default="3e-5,1e-4,3e-4,1e-3", help="comma-separated GRPO learning rates")
    parser.add_argument(
        "--checkpoints", default="3,6,12", help="comma-separated step counts at which to score the validation seeds"
    )
    parser.add_argument("--heldout", type=int, help=f"validation seeds (default {FULL['heldout']})")
    parser.add_argument("--sampled", type=int, help=f"sampled episodes per validation seed (default {FULL['sampled']})")
    parser.add_argument("--groups", type=int, help=f"groups per GRPO step (default {FULL['groups']})")
    parser.add_argument(
        "--validation-offset",
        type=int,
        default=100,
        help="first validation seed, counted from the family's first held-out seed (default 100)",
    )
    parser.add_argument("--out", type=Path, help="keep run folders and sweep.json here (default: a temporary folder)")
    args = parser.parse_args(argv)
    checkpoints = sorted(int(step) for step in args.checkpoints.split(","))
    settings = dict(QUICK if args.quick else FULL, steps=checkpoints[-1], redraws=0)  # every rate sees the same seeds
    settings.update(
        {key: getattr(args, key) for key in ("heldout", "sampled", "groups") if getattr(args, key) is not None}
    )
    spec, rollout = rung_spec(args.family), rollout_config(settings)
    first, end = spec.eval_seeds[0] + args.validation_offset, spec.eval_seeds[1]
    if first + settings["heldout"] > end:
        parser.error(
            f"{settings['heldout']} validation seeds from offset {args.validation_offset} pass the held-out range's "
            f"end {end}"
        )
    spec = spec.model_copy(update={"eval_seeds": (first, end)})
    with tempfile.TemporaryDirectory(prefix="tracegym-sweep-") as scratch:
        out = args.out or Path(scratch)
        warm, before = warm_start_scored(spec, settings, WarmStartConfig.learning_rate, out, rollout)
        print(
            f"{args.family} {spec.knobs}: warm start on validation seeds {first}-{first + settings['heldout'] - 1}: "
            + ", ".join(f"{metric} {d['mean']:.3f}" for metric, d in before.summary().items()),
            flush=True,
        )
        rows = []
        for lr in (float(value) for value in args.lrs.split(",")):
            folder = out / f"lr_{lr:g}"
            trainer = trainer_from_warm_start(spec, settings, "grpo", 0, lr, out / "warm_start", folder, rollout)
            started = time.perf_counter()
            for step in checkpoints:
                trainer.train(progress=False, until=step)
                after = scored(
                    folder / f"heldout_step{step}.json", trainer.policy, trainer.tokenizer, spec, settings, rollout
                )
                difference = compare(before, after)
                rows.append(
                    {
                        "lr": lr,
                        "steps": step,
                        "after": after.summary(),
                        "difference": difference,
                        "seconds": time.perf_counter() - started,
                    }
                )
                print(
                    f"lr {lr:g} step {step}: "
                    + ", ".join(
                        f"{metric} {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
                        for metric, d in difference.items()
                    ),
                    flush=True,
                )
            rows[-1]["train_reward"] = [r["reward_mean"] for r in read_log(folder)]
        result = {
            "family": args.family,
            "knobs": spec.knobs,
            "settings": settings,
            "validation_seeds": before.seeds,
            "warm_start": warm,
            "before": before.summary(),
            "runs": rows,
        }
        (out / "sweep.json").write_text(json.dumps(result, indent=2))
        print(f"wrote {out / 'sweep.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
