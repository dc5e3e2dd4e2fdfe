"""Smoke of benchmarks/sweep.py --quick on the tiny model: one row per (rate, checkpoint), scored on
validation seeds that learning.py's held-out seeds never include."""

from __future__ import annotations

import json
import sys

import pytest
from benchmark_modules import BENCHMARKS, load_benchmark


def test_sweep_scores_on_validation_seeds_apart_from_the_held_out_ones(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sweep, learning = load_benchmark("sweep"), load_benchmark("learning")
    with pytest.raises(SystemExit):
        sweep.main(["--quick", "--heldout", "101"])  # seeds 100..200 pass the family's held-out range (200 seeds)
    assert "pass the held-out range's end" in capsys.readouterr().err

    assert sweep.main(["--quick", "--lrs", "1e-4,1e-3", "--checkpoints", "1,2", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "sweep.json").read_text())
    assert [(row["lr"], row["steps"]) for row in result["runs"]] == [(1e-4, 1), (1e-4, 2), (1e-3, 1), (1e-3, 2)]
    assert all(row["difference"]["greedy_reward"]["n"] == 3 for row in result["runs"])
    first_heldout = learning.rung_spec(result["family"]).eval_seeds[0]
    assert result["validation_seeds"] == list(range(first_heldout + 100, first_heldout + 103))
    heldout = set(range(first_heldout, first_heldout + learning.FULL["heldout"]))
    assert not heldout & set(result["validation_seeds"])
    sys.modules.pop("learning", None)
