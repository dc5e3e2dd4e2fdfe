"""Independent stages of a run played at once, each in a worker process of its own.

The loop's held-out arms are decoded a token at a time in batches of a few episodes, which leaves
one process far from using several cores, so `LoopConfig.eval_workers` plays that many arms at once
(timings: docs/engineering.md, "eval").

Workers are spawned (no forked torch state), split the machine's cores between them, and send their
library output to the run's `run.log` as the main process does. The main process keeps the run's
bookkeeping: it marks a stage running when a worker is free for it and complete when its work
returns, so run.json's seconds are the stage's own and a run killed meanwhile reruns exactly the
stages that were not complete. A stage that fails does not stop the others; every stage that
finished is recorded before the first failure is raised.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from tracegym.eval.run_log import announce, library_output_to
from tracegym.eval.rundir import RunDirectory

StageWork = tuple[Callable[..., Iterable[Path]], tuple[Any, ...]]
_worker_context = contextlib.ExitStack()  # a worker's library-output redirection, held until it exits


def _start_worker(run_root: Path, threads: int, parent: int) -> None:
    """A worker's setup: it dies with the run (process `parent`), uses `threads` torch threads and
    sends library output to the run's log."""
    import torch

    with contextlib.suppress(OSError, AttributeError):  # Linux: the worker dies with the run (PR_SET_PDEATHSIG),
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # so a killed run leaves no stage being written
    if os.getppid() != parent:  # the run was killed while this worker started, before the signal was asked for
        os._exit(1)
    torch.set_num_threads(threads)
    _worker_context.enter_context(library_output_to(run_root))


def run_stages(run: RunDirectory, works: dict[str, StageWork], workers: int) -> None:
    """Run each incomplete stage of `works` (stage name -> (function, arguments); the function is
    called with the arguments and then the stage's folder, and returns the artifacts it wrote): with
    `workers` 1 one after another in this process, else in `workers` processes at once, each with an
    equal share of this machine's cores as torch threads."""
    pending = {}
    for stage, work in works.items():
        done = run.is_complete(stage)
        announce(stage, done)
        if not done and workers == 1:
            function, arguments = work
            run.run_stage(stage, functools.partial(function, *arguments))  # called with the stage's folder last
        elif not done:
            pending[stage] = work
    if not pending:
        return
    threads = max(1, len(os.sched_getaffinity(0)) // workers)
    queue, running, failures = list(pending.items()), {}, []
    spawn = get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=spawn, initializer=_start_worker, initargs=(run.root, threads, os.getpid())
    ) as pool:

        def send_next() -> None:  # a stage is marked running when a worker is free for it
            stage, (function, arguments) = queue.pop(0)
            running[pool.submit(function, *arguments, run.start_stage(stage))] = stage

        for _ in range(min(workers, len(queue))):
            send_next()
        with tqdm(total=len(pending), desc=f"{len(pending)} stages, {workers} at once", unit="stage") as bar:
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    stage = running.pop(future)
                    if future.exception() is None:
                        run.finish_stage(stage, future.result())
                    else:
                        failures.append(future.exception())
                    bar.update()
                    if queue:
                        send_next()
    if failures:
        raise failures[0]
