"""`tracegym ingest PATH... --out DIR`: real agent runs -> DIR/trajectories.jsonl + DIR/ingest_report.json.

Prints one row per source (runs, tasks, successes, failures, skipped records, inconsistencies),
then every skipped record with its reason and the inconsistencies found. On a bad input without
`--keep-going` nothing is written, so a previous good output is never replaced by a partial one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tracegym.analysis.ingest import FORMATS, IngestError, IngestResult, ingest_paths
from tracegym.errors import UserError
from tracegym.files import write_text_atomic
from tracegym.schema import write_jsonl

TRAJECTORIES = "trajectories.jsonl"
REPORT = "ingest_report.json"
_SHOWN_INCONSISTENCIES = 10


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


def _short(path: str, width: int = 60) -> str:
    return path if len(path) <= width else "..." + path[-(width - 3):]


def format_table(result: IngestResult) -> str:
    """The per-source table, then skipped records (all) and inconsistencies (the first few)."""
    header = f"{'source':<60} {'format':<14} {'runs':>5} {'tasks':>5} {'succ':>5} {'fail':>5} {'skip':>5} {'incons':>6} {'repaired':>8}"
    lines = [header, "-" * len(header)]
    for s in result.sources:
        lines.append(
            f"{_short(s.path):<60} {s.format:<14} {s.runs:>5} {s.tasks:>5} {s.successes:>5} {s.failures:>5} "
            f"{s.skipped:>5} {s.inconsistencies:>6} {s.repaired:>8}"
        )
    totals = [sum(getattr(s, name) for s in result.sources) for name in ("runs", "successes", "failures", "skipped", "inconsistencies", "repaired")]
    lines.append("-" * len(header))
    lines.append(f"{'total':<60} {'':<14} {totals[0]:>5} {'':>5} {totals[1]:>5} {totals[2]:>5} {totals[3]:>5} {totals[4]:>6} {totals[5]:>8}")
    if result.skipped:
        lines.append(f"\nskipped records ({len(result.skipped)}):")
        lines.extend(f"  {s.path}: {s.json_path or '(whole file)'}: {s.reason}" for s in result.skipped)
    if result.inconsistencies:
        lines.append(f"\ninconsistencies ({len(result.inconsistencies)}, {totals[5]} repaired):")
        for item in result.inconsistencies[:_SHOWN_INCONSISTENCIES]:
            mark = "repaired" if item.repaired else "kept"
            lines.append(f"  [{mark}] {_short(item.path, 50)}: {', '.join(item.records)}: {item.message}")
        if len(result.inconsistencies) > _SHOWN_INCONSISTENCIES:
            lines.append(f"  ... {len(result.inconsistencies) - _SHOWN_INCONSISTENCIES} more in {REPORT}")
    if result.ignored:
        lines.append(f"\n{len(result.ignored)} walked files are not run files and were ignored (listed in {REPORT})")
    return "\n".join(lines)
