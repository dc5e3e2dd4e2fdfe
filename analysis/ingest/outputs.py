"""What `tracegym ingest` writes and prints: the two output files (replaced together) and the per-source table."""

from __future__ import annotations

import json
from pathlib import Path

from tracegym.analysis.ingest.collect import IngestResult
from tracegym.errors import UserError, one_line
from tracegym.files import replace_together
from tracegym.schema import dump_jsonl

TRAJECTORIES = "trajectories.jsonl"
REPORT = "ingest_report.json"
_SHOWN_INCONSISTENCIES = 10


def write_dataset(result: IngestResult, folder: Path) -> None:
    """Replace `folder`'s trajectories.jsonl and ingest_report.json together (see tracegym.files)."""
    with replace_together(folder, (TRAJECTORIES, REPORT)) as outputs:
        with outputs.open(TRAJECTORIES) as handle:
            dump_jsonl(result.trajectories, handle)
        outputs.write_text(REPORT, json.dumps(result.report(), indent=1))


def empty_input(paths: list[Path], out: Path) -> UserError:
    """The error for inputs that hold no trajectory: an empty dataset would replace the outputs in `out`."""
    named = one_line(", ".join(map(str, paths)))
    return UserError(f"{named}: no trajectories found; {out} is left as it was (--allow-empty writes empty outputs)")


def _short(path: str, width: int = 60) -> str:
    path = one_line(path)
    return path if len(path) <= width else "..." + path[-(width - 3) :]


def format_skipped(result: IngestResult) -> list[str]:
    """Every skipped record, one line each, under a header (nothing when none was skipped)."""
    if not result.skipped:
        return []
    return [f"\nskipped records ({len(result.skipped)}):"] + [
        f"  {s.path}: {s.json_path or '(whole file)'}: {s.reason}" for s in result.skipped
    ]


def format_table(result: IngestResult) -> str:
    """The per-source table, then skipped records (all) and inconsistencies (the first few)."""
    header = (
        f"{'source':<60} {'format':<14} {'runs':>5} {'tasks':>5} {'succ':>5} {'fail':>5} {'skip':>5} "
        f"{'incons':>6} {'repaired':>8}"
    )
    lines = [header, "-" * len(header)]
    for s in result.sources:
        lines.append(
            f"{_short(s.path):<60} {s.format:<14} {s.runs:>5} {s.tasks:>5} {s.successes:>5} {s.failures:>5} "
            f"{s.skipped:>5} {s.inconsistencies:>6} {s.repaired:>8}"
        )
    totals = [
        sum(getattr(s, name) for s in result.sources)
        for name in ("runs", "successes", "failures", "skipped", "inconsistencies", "repaired")
    ]
    lines.append("-" * len(header))
    lines.append(
        f"{'total':<60} {'':<14} {totals[0]:>5} {'':>5} {totals[1]:>5} {totals[2]:>5} {totals[3]:>5} "
        f"{totals[4]:>6} {totals[5]:>8}"
    )
    lines.extend(format_skipped(result))
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
