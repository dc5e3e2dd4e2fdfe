"""`tracegym run [PATH...] --out DIR`: the main job, every stage into one resumable run directory.

Settings come from `RunConfig` (flags, or `--config FILE`; `configs/demo.toml` sizes a CPU demo).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.eval.config import RunConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run", help="ingest, diagnose, synthesise, train: the whole loop, resumable", description=__doc__.splitlines()[0]
    )
    parser.add_argument("inputs", nargs="*", type=Path, metavar="PATH",
                        help="agent runs to diagnose (default: an example run the project writes itself)")
    parser.add_argument("--out", type=Path, required=True, help="run directory (rerun the same command to resume)")
    add_config_arguments(parser, RunConfig)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tracegym.analysis.ingest import IngestError
    from tracegym.eval.pipeline import format_summary, run_pipeline

    for path in args.inputs:
        if not path.exists():
            raise UserError(f"{path}: no such file or folder")
    config = resolve_config(RunConfig, args)
    if args.inputs:
        config = replace(config, inputs=[str(p) for p in args.inputs])
    try:
        summary = run_pipeline(args.out, config)
    except IngestError as error:
        raise UserError(str(error)) from None
    print(format_summary(summary))
    return 0
