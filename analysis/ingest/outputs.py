"""What `tracegym ingest` writes and prints: the output file names and the per-source table."""

from __future__ import annotations

from tracegym.analysis.ingest.collect import IngestResult

TRAJECTORIES = "trajectories.jsonl"
REPORT = "ingest_report.json"
_SHOWN_INCONSISTENCIES = 10


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
