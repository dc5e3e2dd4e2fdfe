"""Atomic file writes: readers see the old file or the new one, never half of one."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator


@contextmanager
def atomic_open(path: str | Path) -> Iterator[IO[str]]:
    """Open `<path>.partial` for writing (UTF-8); on success it replaces `path`, on error it is removed."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    try:
        with partial.open("w", encoding="utf-8") as handle:
            yield handle
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_open(path) as handle:
        handle.write(text)
