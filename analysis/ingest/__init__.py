"""Ingest real agent runs into Trajectory records (see `collect` for the entry point)."""

from tracegym.analysis.ingest.collect import FORMATS, IngestError, IngestResult, Inconsistency, SkippedRecord, SourceSummary, ingest_paths

__all__ = ["FORMATS", "IngestError", "IngestResult", "Inconsistency", "SkippedRecord", "SourceSummary", "ingest_paths"]
