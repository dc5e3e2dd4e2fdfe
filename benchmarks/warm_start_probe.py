"""Which warm-start size puts a family in the calibration band? (how learning.py's WARM_START was chosen)

For each size DIALOGUESxSTEPS: an SFT warm start as learning.py trains it (oracle dialogues of the
last training seeds, batch 2, `--warm-lr`), scored on the first `--probe` training seeds (never the
held-out seeds learning.py reports on): greedy reward and sampled reward (`--sampled` episodes a
seed at the rollout temperature, learning.py's by default). Prints each against the band, CalibrationConfig's [0.2, 0.6]
by default: learning.py wants a warm start whose sampled reward lies in it ("in the band, not solved"),
and the share of seeds whose sampled episodes all failed or all succeeded (mean 0 or 1): GRPO's
groups on such seeds are flat and teach nothing, so a warm start in the band by a few always-solved
seeds leaves GRPO little to learn from.

    python benchmarks/warm_start_probe.py precondition_verification 8x4 8x6 12x6 [--out DIR] [--rung N] [--model PATH]

Cost: 2.5-6 min a size on one core (SmolLM2-135M), most of it the scoring.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from learning import FULL, family_name, rung_spec, warm_start_size, warm_started

from tracegym.adapters.config import WarmStartConfig
from tracegym.adapters.heldout import score_heldout
from tracegym.adapters.lora import attach_lora
from tracegym.adapters.train import env_factory_for, load_base
from tracegym.config import RolloutConfig
from tracegym.synth_envs.calibration import CalibrationConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", type=family_name)
    parser.add_argument("sizes", nargs="+", type=warm_start_size, metavar="DIALOGUESxSTEPS")
    parser.add_argument("--probe", type=int, default=16, help="training seeds scored (default 16)")
    parser.add_argument("--sampled", type=int, default=4, help="sampled episodes a seed (default 4)")
    parser.add_argument(
        "--temperature",
        type=float,
        default=FULL["temperature"],
        help=f"rollout temperature of the sampled episodes (default learning.py's, {FULL['temperature']})",
    )
    parser.add_argument("--warm-lr", type=float, default=WarmStartConfig.learning_rate, help="warm-start learning rate")
    parser.add_argument("--out", type=Path, help="keep each warm start here (default: a temporary folder)")
    parser.add_argument("--rung", type=int, default=0, help="the family's ladder rung (default 0, the easiest)")
    parser.add_argument(
        "--model",
        default=FULL["model"],
        help="the model warm-started, e.g. a loop's base_agent/model (default the embedded SmolLM2-135M)",
    )
    args = parser.parse_args(argv)
    spec = rung_spec(args.family, args.rung)
    band = CalibrationConfig()
    seeds = range(spec.train_seeds[0], spec.train_seeds[0] + args.probe)
    print(
        f"{args.family} {spec.knobs}: reward on training seeds {seeds.start}..{seeds.stop - 1}, "
        f"band [{band.low}, {band.high}]"
    )
    print(f"{'size':>6s} {'greedy':>7s} {'sampled':>8s} {'sampled / band low':>19s} {'all-equal seeds':>16s}  verdict")
    with tempfile.TemporaryDirectory(prefix="tracegym-warm-probe-") as scratch:
        out = args.out or Path(scratch)
        for dialogues, steps in args.sizes:
            settings = {**FULL, "model": args.model, "warm_start": {args.family: (dialogues, steps)}}
            folder = out / f"{args.family}_{dialogues}x{steps}"
            warm_started(spec, settings, args.warm_lr, folder)
            model, tokenizer = load_base(settings["model"])
            scores = score_heldout(
                attach_lora(model, adapter_dir=folder),
                tokenizer,
                env_factory_for(spec),
                seeds,
                RolloutConfig(temperature=args.temperature),
                sampled=args.sampled,
            )
            greedy, sampled = (scores.summary()[metric]["mean"] for metric in ("greedy_reward", "sampled_reward"))
            all_equal = float(np.mean([value in (0.0, 1.0) for value in scores.sampled_reward]))
            verdict = "in band" if band.low <= sampled <= band.high else ("below" if sampled < band.low else "above")
            print(
                f"{dialogues:>3d}x{steps:<2d} {greedy:7.3f} {sampled:8.3f} {sampled / band.low:19.2f} "
                f"{all_equal:16.2f}  {verdict}"
                f"{', greedy solves it' if greedy >= 1.0 else ''}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
