"""Atomic file writes (a command's output files are replaced together, never half of one) and file digests.

`replace_together(folder, names)` writes one set of output files. Each is written to a temporary
`<folder>/<name>.partial`; when every one is complete (and flushed to disk), a journal listing
them (`<folder>/.<first name>.commit`) is written, the temporaries are moved over their final
names back to back, and the journal is removed. What a killed process (SIGKILL included) leaves:

- killed while writing: the old set, untouched, and some temporaries; their names are fixed, so
  the next write of the set overwrites and moves them (or removes them if it fails itself);
- killed while moving: the journal and the temporaries not yet moved; the next write of any set
  in the folder first finishes those moves (every listed temporary was complete), so the folder
  holds the whole new set.

So a reader finds the complete old set or the complete new set, except inside the moves
themselves (microseconds) or after a kill during them until the next write. Two commands writing
the same set into the same folder at the same time are not supported (they share temporaries).
`atomic_open(path)` is the one-file case (a single move, no journal).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tracegym.errors import UserError, one_line

PARTIAL = ".partial"
JOURNAL = ".commit"


class OutputSet:
    """The temporaries of one `replace_together` block: write each output through `open` or to `path`."""

    def __init__(self, folder: Path, names: tuple[str, ...]) -> None:
        self.folder = folder
        self.names = names

    def path(self, name: str) -> Path:
        """Where output `name` is written before it is moved in (`<name>.partial`)."""
        if name not in self.names:
            raise ValueError(f"{name!r} is not one of this set's files ({', '.join(self.names)})")
        return self.folder / (name + PARTIAL)

    def open(self, name: str, binary: bool = False) -> IO[Any]:
        """Open output `name`'s temporary for writing (UTF-8 text unless `binary`)."""
        return self.path(name).open("wb") if binary else self.path(name).open("w", encoding="utf-8")

    def write_text(self, name: str, text: str) -> None:
        with self.open(name) as handle:
            handle.write(text)


@contextmanager
def replace_together(folder: str | Path, names: Iterable[str]) -> Iterator[OutputSet]:
    """Write the files `names` of the existing `folder` as one set (see the module docstring).

    On an exception inside the block the temporaries are removed and the old set stays.
    """
    folder, names = Path(folder), tuple(names)
    if not names or len(set(names)) != len(names) or not all(_is_plain_name(name) for name in names):
        raise ValueError(f"output names must be distinct plain file names, got {names}")
    _finish_moves(folder)
    outputs = OutputSet(folder, names)
    try:
        yield outputs
        missing = [name for name in names if not outputs.path(name).is_file()]
        if missing:
            raise ValueError(f"{folder}: the block wrote no {', '.join(missing)}")
        for name in names:
            _flush(outputs.path(name))
    except BaseException:
        for name in names:
            outputs.path(name).unlink(missing_ok=True)
        raise
    # Past this point a failure leaves the journal and the temporaries for `_finish_moves` to finish.
    if len(names) == 1:
        os.replace(outputs.path(names[0]), folder / names[0])
    else:
        journal = _journal(folder, names)
        journal_partial = journal.with_name(journal.name + PARTIAL)
        journal_partial.write_text(json.dumps(list(names)), encoding="utf-8")
        _flush(journal_partial)
        os.replace(journal_partial, journal)
        for name in names:
            os.replace(outputs.path(name), folder / name)
        journal.unlink()
    _flush(folder)


def _finish_moves(folder: Path) -> None:
    """Finish the moves listed by every journal a killed write left in `folder`."""
    for journal in sorted(folder.glob(f".*{JOURNAL}")):
        try:
            listed = json.loads(journal.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            listed = []  # unreadable: nothing can be finished safely
        for name in listed if isinstance(listed, list) else []:
            partial = folder / f"{name}{PARTIAL}"
            if isinstance(name, str) and _is_plain_name(name) and partial.is_file():
                os.replace(partial, folder / name)
        journal.unlink(missing_ok=True)


def _journal(folder: Path, names: tuple[str, ...]) -> Path:
    return folder / f".{names[0]}{JOURNAL}"


def _is_plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def _flush(path: Path) -> None:
    """fsync a file or folder, so that a move never lands before the data it moves."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextmanager
def writing_into(folder: Path) -> Iterator[Path]:
    """Create `folder` (and its parents) for a command's outputs; an OSError inside the block (a
    file in the way, no space, no permission) becomes a one-line UserError naming the folder."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
    except OSError as error:
        where = one_line(str(error.filename or folder))
        raise UserError(
            f"{where}: cannot write the outputs: {error.strerror or error}; the previous ones are kept"
        ) from None


@contextmanager
def atomic_open(path: str | Path) -> Iterator[IO[str]]:
    """Open `<path>.partial` for writing (UTF-8); on success it replaces `path`, on error it is removed."""
    path = Path(path)
    with replace_together(path.parent, [path.name]) as outputs, outputs.open(path.name) as handle:
        yield handle


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_open(path) as handle:
        handle.write(text)


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
