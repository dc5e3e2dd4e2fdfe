"""Errors every stage may raise to the user: one line on stderr and exit code 1, no traceback."""

from __future__ import annotations

import re

# Characters that would break a message over lines or fail to print: C0/C1 controls, line and
# paragraph separators, lone surrogates (undecodable bytes in file names).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


class UserError(Exception):
    """A problem with the user's input (a bad file, a missing model, a corrupted run directory).

    The message names the file and what is wrong; the CLI prints it as one line and exits 1.
    """


def one_line(text: str) -> str:
    """`text` with every newline, control character and lone surrogate written as its escape (\\n, \\x00, \\udcff)."""
    return _UNPRINTABLE.sub(lambda match: repr(match.group())[1:-1], text)
