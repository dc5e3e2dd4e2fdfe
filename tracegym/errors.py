"""Errors every stage may raise to the user: one line on stderr and exit code 1, no traceback."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input (a bad file, a missing model, a corrupted run directory).

    The message names the file and what is wrong; the CLI prints it as one line and exits 1.
    """
