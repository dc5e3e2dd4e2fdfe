"""One watchdog thread per process that interrupts work running past its deadline.

`Watchdog.guard(interrupt, timeout_s)` runs a block and calls `interrupt()` from the watchdog
thread if the block is still running after `timeout_s` seconds (wall clock). The thread starts on
first use, sleeps until the earliest deadline, and costs a guarded block two lock round trips
(a timer thread per block would cost far more; docs/engineering.md, "synth_envs").
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Watchdog:
    """Calls a guard's `interrupt` once if its block is still running `timeout_s` seconds after it began."""

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._deadlines: dict[int, tuple[float, Callable[[], None]]] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    @contextmanager
    def guard(self, interrupt: Callable[[], None], timeout_s: float) -> Iterator[None]:
        """Run the block; past `timeout_s` seconds (wall), `interrupt()` is called from the watchdog thread."""
        token = next(self._tokens)
        with self._wake:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="tracegym-watchdog", daemon=True)
                self._thread.start()
            self._deadlines[token] = (time.monotonic() + timeout_s, interrupt)
            self._wake.notify()
        try:
            yield
        finally:
            with self._wake:
                self._deadlines.pop(token, None)  # after this the block can no longer be interrupted

    def _watch(self) -> None:
        with self._wake:
            while True:
                if not self._deadlines:
                    self._wake.wait()
                    continue
                now = time.monotonic()
                due = [token for token, (deadline, _) in self._deadlines.items() if deadline <= now]
                for token in due:
                    self._deadlines.pop(token)[1]()
                if not due:
                    self._wake.wait(min(deadline for deadline, _ in self._deadlines.values()) - now)


WATCHDOG = Watchdog()
