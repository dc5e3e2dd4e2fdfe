"""Where in a JSON text a decoding error is, as a JSON path: a scan of the text up to that point.

Only called after decoding failed, so it may be slow (a regular-expression pass in Python).
"""

from __future__ import annotations

import json
import re

# Strings (escapes included; one cut off by the end of the scan too) and structural characters;
# numbers and literals need no tracking.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*\\?(?:"|$)|[\[\]{},]')


def offset_of(text: str, line: int, column: int) -> int:
    """The character offset of 1-based `line` and byte `column` (as pydantic_core reports them)."""
    start = 0
    for _ in range(line - 1):
        start = text.find("\n", start) + 1
        if start == 0:
            return len(text)
    end = text.find("\n", start)
    prefix = text[start : len(text) if end < 0 else end].encode("utf-8", "surrogatepass")[: max(column - 1, 0)]
    return start + len(prefix.decode("utf-8", "ignore"))


def json_path_at(text: str, offset: int | None = None, max_depth: int | None = None) -> tuple[int | str, ...]:
    """The keys and indices of the containers open at character `offset` of `text`, or, with
    `max_depth`, of those open where a container first opens deeper than that (() if none does)."""
    frames: list[list] = []  # [is_object, key (None until read) or index]
    for token in _TOKEN.finditer(text, 0, len(text) if offset is None else offset):
        mark = token.group()
        if mark in ("[", "{"):
            if len(frames) == max_depth:
                return _loc(frames)
            frames.append([mark == "{", None if mark == "{" else 0])
        elif mark in ("]", "}"):
            if frames:
                frames.pop()
        elif mark == ",":
            if frames:
                frames[-1][1] = None if frames[-1][0] else frames[-1][1] + 1
        elif frames and frames[-1][0] and frames[-1][1] is None and len(mark) > 1 and mark.endswith('"'):
            frames[-1][1] = _key(mark)  # a key cut off by the end of the scan is not read yet
    return () if max_depth is not None else _loc(frames)


def _loc(frames: list[list]) -> tuple[int | str, ...]:
    return tuple(key for _, key in frames if key is not None)


def _key(token: str) -> str:
    try:
        return json.loads(token)
    except ValueError:
        return token.strip('"')
