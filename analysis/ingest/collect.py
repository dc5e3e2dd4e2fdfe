"""Ingest real agent runs into Trajectory records: find the sources, sniff each format, gather counts.

Formats (sniffed from content, or forced with `fmt`; the protocol and registry are in `formats`):
`tau2_results` (τ²-bench Results JSON), `tau_v1` (τ-bench v1 trajectory list),
`swebench_experiments` (a submission folder of the SWE-bench experiments repository),
`mini_swe_agent` and `openhands` (SWE-bench run folders, or one trajectory file inside such a
folder), `trajectories` (tracegym's own trajectories.jsonl), `chat_jsonl` (OpenAI chat JSONL with a
reward). Folders are walked (see `walk`): a SWE-bench run folder is one source; elsewhere
every `.json` / `.jsonl` file is one. A walked file that parses but matches no format (an index, a
task list) is listed in `IngestResult.ignored`; a file named explicitly must match a format.

By default the first bad file or record raises `IngestError` naming the file and the JSON path;
with `keep_going=True` it is listed in `IngestResult.skipped` and the rest is ingested.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tracegym.analysis.ingest.common import Batch, Inconsistency, IngestError, InputFile, RecordError, SkippedRecord
from tracegym.analysis.ingest.formats import FORMATS, FileFormat, by_name, registry, run_folder_formats
from tracegym.analysis.ingest.walk import Found, discover
from tracegym.schema import Trajectory

__all__ = ["FORMATS", "IngestError", "IngestResult", "Inconsistency", "SkippedRecord", "SourceSummary", "ingest_paths"]


@dataclass
class SourceSummary:
    """Counts for one source (a file or a run folder). `failures` are graded non-successes;
    `ungraded` have no reward (e.g. τ² infrastructure errors)."""

    path: str
    format: str
    runs: int = 0
    tasks: int = 0
    successes: int = 0
    failures: int = 0
    ungraded: int = 0
    skipped: int = 0
    inconsistencies: int = 0
    repaired: int = 0


@dataclass
class IngestResult:
    """Everything one ingest produced; `ignored` lists walked files that are not run files."""

    trajectories: list[Trajectory] = field(default_factory=list)
    sources: list[SourceSummary] = field(default_factory=list)
    skipped: list[SkippedRecord] = field(default_factory=list)
    inconsistencies: list[Inconsistency] = field(default_factory=list)
    ignored: list[SkippedRecord] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        """A JSON-ready summary (what `tracegym ingest` writes as ingest_report.json)."""
        return {
            "trajectories": len(self.trajectories),
            "sources": [asdict(s) for s in self.sources],
            "skipped": [asdict(s) for s in self.skipped],
            "inconsistencies": [asdict(i) for i in self.inconsistencies],
            "ignored": [asdict(i) for i in self.ignored],
        }


def ingest_paths(paths: list[Path], keep_going: bool = False, fmt: str | None = None) -> IngestResult:
    """Ingest files and folders (walked); raises IngestError on bad input unless `keep_going`."""
    forced = by_name(fmt) if fmt is not None else None
    run_formats = (forced,) if forced in run_folder_formats() else run_folder_formats()
    result = IngestResult()
    sources = discover(paths, run_formats)
    with _collector_paused():
        _ingest_sources(result, sources, keep_going, forced)
    return result


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector, restoring its state after.

    Ingest allocates tens of thousands of acyclic objects per large file while the parsed documents
    stay alive, which the collector would rescan for nothing (docs/engineering.md, "analysis").
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _ingest_sources(result: IngestResult, sources: list[Found], keep_going: bool, forced: FileFormat | None) -> None:
    for found in tqdm(sources, desc="ingest", unit="source", disable=None, leave=False):
        try:
            batch = _read_source(found, forced)
        except IngestError as error:
            if not keep_going:
                raise
            result.skipped.append(SkippedRecord(error.path, error.json_path, error.reason))
            result.sources.append(SourceSummary(str(found.path), forced.FORMAT if forced else "unknown", skipped=1))
            continue
        if batch is None:
            result.ignored.append(SkippedRecord(str(found.path), "", "not a run file: matches no known format"))
            continue
        if batch.skipped and not keep_going:
            first = batch.skipped[0]
            raise IngestError(first.path, first.json_path, first.reason)
        result.trajectories.extend(batch.trajectories)
        result.skipped.extend(batch.skipped)
        result.inconsistencies.extend(batch.inconsistencies)
        result.sources.append(_summary(batch))


def _read_source(found: Found, forced: FileFormat | None) -> Batch | None:
    """One source as a Batch; None for a walked file that matches no format."""
    if found.problem:
        raise IngestError(found.path, "", found.problem)
    if found.run_format is not None:
        return found.run_format.read_run(found.path)
    file = InputFile(found.path)
    module = forced or next((f for f in registry() if f.sniff(file)), None)
    if module is None:
        document = file.json()  # raises the decoding error when the file is not JSON at all
        if not found.explicit:
            return None
        raise IngestError(found.path, "", f"unknown format ({_shape(document)}); known formats: {', '.join(FORMATS)}")
    try:
        return module.read(file)
    except RecordError as error:
        raise IngestError(found.path, error.json_path, error.reason) from None


def _shape(document: Any) -> str:
    if isinstance(document, dict):
        keys = ", ".join(key[:40] for key in list(document)[:8])
        return f"an object with keys {keys}" if keys else "an empty object"
    if isinstance(document, list):
        return f"a list of {len(document)} items" + (f" of type {type(document[0]).__name__}" if document else "")
    return f"a JSON {type(document).__name__}"


def _summary(batch: Batch) -> SourceSummary:
    trajectories = batch.trajectories
    successes = sum(t.success for t in trajectories)
    ungraded = sum(t.reward is None and not t.success for t in trajectories)
    return SourceSummary(
        path=batch.path,
        format=batch.format,
        runs=len(trajectories),
        tasks=len({t.task_id for t in trajectories}),
        successes=successes,
        failures=len(trajectories) - successes - ungraded,
        ungraded=ungraded,
        skipped=len(batch.skipped),
        inconsistencies=len(batch.inconsistencies),
        repaired=sum(i.repaired for i in batch.inconsistencies),
    )
