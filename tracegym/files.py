"""Atomic file writes (readers see the old file or the new one, never half of one) and file digests."""

from __future__ import annotations

import hashlib
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


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
