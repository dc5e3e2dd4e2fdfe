"""The ingest formats: the protocol a format module implements, and the registry in sniffing order.

A format is one module of this package providing:

    FORMAT: str                          its name (the `--format` value, `Source.format`)
    sniff(file: InputFile) -> bool       whether the file is in this format, judged from its content
                                         (`file.document()` for a JSON document, `file.first_line()`
                                         for JSONL); never raises for a file of another format
    read(file: InputFile) -> Batch       every record of the file: records it cannot read go to
                                         `Batch.skip` with their JSON path; a file it cannot read
                                         at all raises IngestError (or RecordError for its top level)

A format whose runs are folders (the SWE-bench harness layouts) also provides:

    is_run_dir(path: Path) -> bool       whether a folder is one run (one source, not walked)
    read_run(path: Path) -> Batch        every record of that run folder

Adding a format is one module plus its entry in REGISTRY. Order matters: the first format whose
`sniff` accepts a file reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from tracegym.analysis.ingest import chat_jsonl, mini_swe, openhands, swebench_experiments, tau2, tau_v1, trajectories
from tracegym.analysis.ingest.common import Batch, InputFile


class FileFormat(Protocol):
    FORMAT: str

    def sniff(self, file: InputFile) -> bool: ...

    def read(self, file: InputFile) -> Batch: ...


class RunFolderFormat(FileFormat, Protocol):
    def is_run_dir(self, path: Path) -> bool: ...

    def read_run(self, path: Path) -> Batch: ...


# tracegym's own trajectories.jsonl before chat JSONL: its lines also hold `messages`; an experiments
# submission folder before a mini-swe-agent one: it too can hold trajs/ beside logs/.
REGISTRY: tuple[FileFormat, ...] = (tau2, tau_v1, swebench_experiments, mini_swe, openhands, trajectories, chat_jsonl)
RUN_FOLDER_FORMATS: tuple[RunFolderFormat, ...] = tuple(f for f in REGISTRY if hasattr(f, "is_run_dir"))
FORMATS: tuple[str, ...] = tuple(f.FORMAT for f in REGISTRY)


def by_name(name: str) -> FileFormat:
    """The registered format called `name` (ValueError naming the known ones otherwise)."""
    for module in REGISTRY:
        if module.FORMAT == name:
            return module
    raise ValueError(f"unknown format {name!r}; known: {', '.join(FORMATS)}")
