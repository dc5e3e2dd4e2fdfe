"""`tracegym ingest PATH... --out DIR`: real agent runs -> DIR/trajectories.jsonl + DIR/ingest_report.json.

Prints one row per source (runs, tasks, successes, failures, skipped records, inconsistencies),
then every skipped record with its reason and the inconsistencies found. The two files are
replaced together (see tracegym.files); nothing is written on a bad input without `--keep-going`,
nor when the inputs hold no trajectory unless `--allow-empty`, so a good dataset is never replaced
by a partial or empty one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tracegym.analysis.ingest.formats import FORMATS
from tracegym.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ingest", help="convert agent runs (τ², τ v1, SWE-bench, chat JSONL) to trajectories"
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="run files or folders (folders are walked)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--format", choices=FORMATS, default=None, help="force a format instead of sniffing it")
    parser.add_argument(
        "--keep-going", action="store_true", help="skip bad files and records (all listed) instead of stopping"
    )
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="write an empty dataset when the inputs hold no trajectory (default: exit 1, outputs kept)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tracegym.analysis.ingest.collect import IngestError, ingest_paths
    from tracegym.analysis.ingest.outputs import REPORT, TRAJECTORIES, empty_input, format_table, write_dataset
    from tracegym.files import writing_into

    try:
        result = ingest_paths(args.paths, keep_going=args.keep_going, fmt=args.format)
    except IngestError as error:
        raise UserError(f"{error} (use --keep-going to skip it and ingest the rest)") from None
    print(format_table(result))
    if not result.trajectories and not args.allow_empty:
        raise empty_input(args.paths, args.out)
    with writing_into(args.out):
        write_dataset(result, args.out)
    print(
        f"wrote {len(result.trajectories)} trajectories to {args.out / TRAJECTORIES} "
        f"and the report to {args.out / REPORT}"
    )
    return 0
