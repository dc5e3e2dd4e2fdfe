"""Ingest real agent runs into Trajectory records.

- `collect`: `ingest_paths`, the entry point (sniff, read, keep-going, counts per source);
- `walk`: finding the sources under the given paths (run folders whole, links visited once);
- `formats`: the protocol a format module implements (`sniff`, `read`) and the registry;
- one module per format: `tau2`, `tau_v1`, `swebench_experiments`, `mini_swe`, `openhands` (with
  `swebench`, what the SWE-bench layouts share), `trajectories` (tracegym's own JSONL), `chat_jsonl`;
- `common`: errors, `Batch`, `InputFile` and JSON decoding with hostile-input limits, shared
  parsing helpers; `locate`: the JSON path of a decoding error;
- `outputs`: what `tracegym ingest` writes (replaced together) and prints.
"""

from typing import Any

__all__ = ["FORMATS", "IngestError", "IngestResult", "Inconsistency", "SkippedRecord", "SourceSummary", "ingest_paths"]


def __getattr__(name: str) -> Any:
    """The entry points, imported on first use (`tracegym ingest --help` needs none of them)."""
    if name in __all__:
        from tracegym.analysis.ingest import collect

        return getattr(collect, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
