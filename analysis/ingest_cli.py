"""`tracegym ingest PATH... --out DIR`: real agent runs -> DIR/trajectories.jsonl + DIR/ingest_report.json.

Prints one row per source (runs, tasks, successes, failures, skipped records, inconsistencies),
then every skipped record with its reason and the inconsistencies found. On a bad input without
`--keep-going` nothing is written, so a previous good output is never replaced by a partial one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tracegym.analysis.ingest import FORMATS, IngestError, ingest_paths
from tracegym.analysis.ingest.outputs import REPORT, TRAJECTORIES, format_table
from tracegym.errors import UserError
from tracegym.files import write_text_atomic
from tracegym.schema import write_jsonl


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("ingest", help="convert agent runs (τ², τ v1, SWE-bench, chat JSONL) to trajectories")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="run files or folders (folders are walked)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--format", choices=FORMATS, default=None, help="force a format instead of sniffing it")
    parser.add_argument("--keep-going", action="store_true", help="skip bad files and records (all listed) instead of stopping")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        result = ingest_paths(args.paths, keep_going=args.keep_going, fmt=args.format)
    except IngestError as error:
        raise UserError(f"{error} (use --keep-going to skip it and ingest the rest)") from None
    args.out.mkdir(parents=True, exist_ok=True)
    write_jsonl(result.trajectories, args.out / TRAJECTORIES)
    write_text_atomic(args.out / REPORT, json.dumps(result.report(), indent=1))
    print(format_table(result))
    print(f"wrote {len(result.trajectories)} trajectories to {args.out / TRAJECTORIES} and the report to {args.out / REPORT}")
    return 0
