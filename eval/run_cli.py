"""`tracegym run [PATH...] --out DIR`: the main job, every stage into one resumable run directory.

Without PATH: the loop on the target environment (base agent, its train-split runs, diagnosis,
environments, adapters, router, held-out arms, report.md). With PATH: diagnose those runs,
synthesise and train. Settings come from `RunConfig` (flags, `--config FILE`; `--quick` applies
configs/quick.toml of the source checkout first: the tiny model, a smoke run in minutes).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.eval.config import STOP_POINTS, RunConfig

QUICK = Path(__file__).resolve().parents[1] / "configs" / "quick.toml"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="the loop on the target, or diagnose-synth-train on given runs; resumable",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument(
        "inputs",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="agent runs to diagnose (default: the loop on the target environment)",
    )
    parser.add_argument("--out", type=Path, required=True, help="run directory (rerun the same command to resume)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke-run sizes from {QUICK.name} (tiny model, minutes), under --config and flags",
    )
    parser.add_argument(
        "--stop-after",
        choices=STOP_POINTS,
        help="end the run after this stage (the base agent's runs, or their diagnosis); rerun without it to carry on",
    )
    add_config_arguments(parser, RunConfig)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tracegym.analysis.ingest import IngestError
    from tracegym.eval.pipeline import format_summary, run_pipeline

    for path in args.inputs:
        if not path.exists():
            raise UserError(f"{path}: no such file or folder")
    if args.quick and not QUICK.is_file():
        raise UserError(f"{QUICK}: --quick needs the configs folder of a source checkout; pass --config FILE instead")
    config = resolve_config(RunConfig, args, QUICK if args.quick else None)
    if args.inputs:
        config = replace(config, inputs=[str(p) for p in args.inputs])
    try:
        summary = run_pipeline(args.out, config, args.stop_after)
    except IngestError as error:
        raise UserError(str(error)) from None
    print(format_summary(summary))
    return 0
