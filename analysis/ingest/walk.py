"""Finding the sources under the paths given to ingest: run folders whole, other files one by one.

Folders are walked depth first in name order, hidden entries skipped. Links are followed, but
every folder and file is visited once, by its real path, so a link loop or links to a parent cost
nothing. While walking only regular `.json` / `.jsonl` files are taken; a named path must be a
regular file or a folder. A problem (a missing path, a folder that cannot be listed) becomes a
source carrying it, so that keep-going lists it like any bad file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tracegym.analysis.ingest.formats import RunFolderFormat

FILE_SUFFIXES = (".json", ".jsonl")
_NOT_REGULAR = "not a regular file or a folder (a broken link, a pipe, a device?)"


@dataclass(frozen=True)
class Found:
    """One source: a file or run folder; `explicit` when named (it must then match a format)."""

    path: Path
    explicit: bool
    run_format: RunFolderFormat | None = None
    problem: str = ""


def discover(paths: list[Path], run_formats: tuple[RunFolderFormat, ...]) -> list[Found]:
    """The sources under `paths`, in order, each once even when named twice or linked."""
    seen: set[str] = set()
    found: list[Found] = []
    for path in map(Path, paths):
        try:
            if not path.exists():
                found.append(Found(path, True, problem="no such file or directory"))
            elif path.is_dir():
                found.extend(_walk(path, run_formats, seen))
            elif not path.is_file():
                found.append(Found(path, True, problem=_NOT_REGULAR))
            elif _first_visit(path, seen):
                found.append(Found(path, True))
        except OSError as error:
            found.append(Found(path, True, problem=f"cannot inspect: {error.strerror or error}"))
    return found


def _walk(root: Path, run_formats: tuple[RunFolderFormat, ...], seen: set[str]) -> Iterator[Found]:
    """Depth first without recursion (folder depth is the input's to choose)."""
    stack: list[Iterator[Path]] = []
    if _first_visit(root, seen):
        found = _enter(root, run_formats, stack)
        if found is not None:
            yield found
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            continue
        try:
            if child.name.startswith("."):
                continue
            if child.is_dir():
                if _first_visit(child, seen):
                    found = _enter(child, run_formats, stack)
                    if found is not None:
                        yield found
            elif child.suffix in FILE_SUFFIXES and _first_visit(child, seen):
                yield Found(child, False) if child.is_file() else Found(child, True, problem=_NOT_REGULAR)
        except OSError as error:
            yield Found(child, True, problem=f"cannot inspect: {error.strerror or error}")


def _enter(folder: Path, run_formats: tuple[RunFolderFormat, ...], stack: list[Iterator[Path]]) -> Found | None:
    """A run folder as one source, or else its entries pushed for walking (None then)."""
    try:
        run_format = next((f for f in run_formats if f.is_run_dir(folder)), None)
        if run_format is not None:
            return Found(folder, True, run_format)
        stack.append(iter(sorted(folder.iterdir())))
    except OSError as error:
        return Found(folder, True, problem=f"cannot list folder: {error.strerror or error}")
    return None


def _first_visit(path: Path, seen: set[str]) -> bool:
    real = os.path.realpath(path)
    if real in seen:
        return False
    seen.add(real)
    return True
