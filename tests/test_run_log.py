"""`tracegym run`'s terminal: library warnings and the libraries' own progress bars stay off it
(warnings go to run.log), the project's bars stay on, and everything is restored after the block."""

from __future__ import annotations

import warnings

import datasets
from tqdm.auto import tqdm
from transformers.utils import logging as hf_logging

from tracegym.eval.run_log import LOG_FILE, library_output_to


def test_library_output_leaves_the_terminal_and_comes_back(tmp_path, capfd):
    assert hf_logging.is_progress_bar_enabled() and datasets.is_progress_bar_enabled()
    with library_output_to(tmp_path) as log:
        assert log == tmp_path / LOG_FILE
        for _ in hf_logging.tqdm(range(3), desc="Loading weights"):
            pass
        datasets.Dataset.from_dict({"x": [1, 2]}).map(lambda row: row, desc="Truncating train dataset")
        warnings.warn("a library's deprecation notice", FutureWarning, stacklevel=1)
        for _ in tqdm(range(2), desc="grpo"):
            pass
    terminal = capfd.readouterr().err
    assert "Loading weights" not in terminal and "Truncating" not in terminal
    assert "deprecation notice" not in terminal and "deprecation notice" in log.read_text()
    assert "grpo" in terminal, "the project's own bars stay on the terminal"
    assert hf_logging.is_progress_bar_enabled() and datasets.is_progress_bar_enabled()
