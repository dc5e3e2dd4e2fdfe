"""What the terminal shows during `tracegym run`: stage announcements, progress bars of the work
itself (training steps, episodes) and the project's own messages. Library chatter (Python warnings,
transformers/peft/trl/accelerate logs, the trainers' printed loss dicts) goes to `run.log` in the
run directory instead, and the libraries' own bars (loading weights, tokenising a dataset) are off.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

LOG_FILE = "run.log"
LIBRARIES = ("py.warnings", "transformers", "peft", "trl", "accelerate", "torch", "datasets", "httpx")


class _ProjectOnly(logging.Filter):
    """Keeps records of the project's loggers off the libraries' ones."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(record.name == name or record.name.startswith(name + ".") for name in LIBRARIES)


@contextlib.contextmanager
def library_output_to(run_dir: Path) -> Iterator[Path]:
    """Within the block, every log record goes to `run_dir/run.log`, library records go only
    there, Python warnings become log records and the libraries' progress bars are off (restored
    after). Yields the log file's path."""
    path = run_dir / LOG_FILE
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    console_filter = _ProjectOnly()
    consoles = list(root.handlers)
    for console in consoles:
        console.addFilter(console_filter)
    root.addHandler(handler)
    import datasets
    from transformers.utils import logging as hf_logging  # its own handler would print to stderr

    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()
    hf_bars, datasets_bars = hf_logging.is_progress_bar_enabled(), datasets.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Loading weights" at every model load; the trainers' own bars stay
    datasets.disable_progress_bars()  # TRL's dataset preparation passes
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        logging.captureWarnings(True)
        try:
            yield path
        finally:
            logging.captureWarnings(False)
            if hf_bars:
                hf_logging.enable_progress_bar()
            if datasets_bars:
                datasets.enable_progress_bars()
            hf_logging.disable_propagation()
            hf_logging.enable_default_handler()
            root.removeHandler(handler)
            handler.close()
            for console in consoles:
                console.removeFilter(console_filter)


@contextlib.contextmanager
def printed_to_log(run_dir: Path) -> Iterator[None]:
    """Send what the block prints on stdout (a trainer's loss dicts) to run.log; stderr (progress
    bars) stays on the terminal."""
    with open(run_dir / LOG_FILE, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log):
        yield
    sys.stdout.flush()


def announce(stage: str, done: bool) -> None:
    """One line per stage on the terminal, before it runs (or is skipped)."""
    print(f"== {stage}{'  (complete, skipped)' if done else ''}", flush=True)
