"""`tracegym run --out DIR`: the main job, every stage into one resumable run directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from tracegym.errors import UserError
from tracegym.models import DEFAULT_MODEL


def register(subparsers: argparse._SubParsersAction) -> None:
    from tracegym.eval.pipeline import RunConfig

    defaults = RunConfig()
    parser = subparsers.add_parser(
        "run", help="ingest, diagnose, synthesise, train: the whole loop, resumable", description=__doc__.splitlines()[0]
    )
    parser.add_argument("inputs", nargs="*", type=Path, metavar="PATH",
                        help="agent runs to diagnose (default: an example run the project writes itself)")
    parser.add_argument("--out", type=Path, required=True, help="run directory (rerun the same command to resume)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"policy model: {DEFAULT_MODEL}, a local dir, a hub id, or 'tiny'")
    parser.add_argument("--max-adapters", type=int, default=defaults.max_adapters,
                        help=f"capabilities to train, by mean Δ (default {defaults.max_adapters})")
    parser.add_argument("--credit", choices=("trace", "grpo"), default=defaults.credit, help="turn credit or plain GRPO")
    parser.add_argument("--grpo-steps", type=int, default=defaults.grpo_steps, help=f"GRPO updates (default {defaults.grpo_steps})")
    parser.add_argument("--warm-start-steps", type=int, default=defaults.warm_start_steps,
                        help=f"SFT steps on oracle dialogues (default {defaults.warm_start_steps})")
    parser.add_argument("--calibration-seeds", type=int, default=defaults.calibration_seeds,
                        help=f"seeds per knob setting when calibrating to the warm-started policy (0: skip; default {defaults.calibration_seeds})")
    parser.add_argument("--heldout-seeds", type=int, default=defaults.heldout_seeds,
                        help=f"held-out episodes scored before and after (default {defaults.heldout_seeds})")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tracegym.analysis.ingest import IngestError
    from tracegym.eval.pipeline import RunConfig, format_summary, run_pipeline
    from tracegym.eval.rundir import RunDirectoryError

    for path in args.inputs:
        if not path.exists():
            raise UserError(f"{path}: no such file or folder")
    config = RunConfig(
        model=args.model, inputs=[str(p) for p in args.inputs], max_adapters=args.max_adapters, credit=args.credit,
        grpo_steps=args.grpo_steps, warm_start_steps=args.warm_start_steps, calibration_seeds=args.calibration_seeds,
        heldout_seeds=args.heldout_seeds, seed=args.seed,
    )
    try:
        summary = run_pipeline(args.out, config)
    except (IngestError, RunDirectoryError) as error:
        raise UserError(str(error)) from None
    print(format_summary(summary))
    return 0
