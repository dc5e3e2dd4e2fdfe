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

Adding a format is one module plus its entry in `_MODULES`. Order matters: the first format whose
`sniff` accepts a file reads it. Format modules are imported on first use, so naming the formats
(`FORMATS`, for `--help`) costs nothing.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tracegym.analysis.ingest.common import Batch, InputFile


class FileFormat(Protocol):
    FORMAT: str

    def sniff(self, file: InputFile) -> bool: ...

    def read(self, file: InputFile) -> Batch: ...


class RunFolderFormat(FileFormat, Protocol):
    def is_run_dir(self, path: Path) -> bool: ...

    def read_run(self, path: Path) -> Batch: ...


# format name -> its module in this package, in sniffing order; tracegym's own trajectories.jsonl
# before chat JSONL: its lines also hold `messages`; an experiments submission folder before a
# mini-swe-agent one: it too can hold trajs/ beside logs/.
_MODULES: dict[str, str] = {
    "tau2_results": "tau2",
    "tau_v1": "tau_v1",
    "swebench_experiments": "swebench_experiments",
    "mini_swe_agent": "mini_swe",
    "openhands": "openhands",
    "trajectories": "trajectories",
    "chat_jsonl": "chat_jsonl",
}
FORMATS: tuple[str, ...] = tuple(_MODULES)


@functools.cache
def registry() -> tuple[FileFormat, ...]:
    """Every format module, imported, in sniffing order."""
    modules = []
    for name, module_name in _MODULES.items():
        module = importlib.import_module(f"{__package__}.{module_name}")
        if module.FORMAT != name:
            raise ImportError(f"{module.__name__}.FORMAT is {module.FORMAT!r}, registered as {name!r}")
        modules.append(module)
    return tuple(modules)


def run_folder_formats() -> tuple[RunFolderFormat, ...]:
    """The formats whose runs are folders."""
    return tuple(f for f in registry() if hasattr(f, "is_run_dir"))


def by_name(name: str) -> FileFormat:
    """The registered format called `name` (ValueError naming the known ones otherwise)."""
    if name not in _MODULES:
        raise ValueError(f"unknown format {name!r}; known: {', '.join(FORMATS)}")
    return registry()[FORMATS.index(name)]
