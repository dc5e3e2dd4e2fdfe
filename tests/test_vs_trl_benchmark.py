"""Smoke of benchmarks/vs_trl.py --quick on the tiny model: both trainers train from one warm start
on the same training seeds, the step times and paired held-out changes are written, and a rerun
reuses the finished runs."""

from __future__ import annotations

import json

import pytest
from benchmark_modules import BENCHMARKS, load_benchmark


def test_vs_trl_quick(tmp_path, capsys, monkeypatch, fresh_accelerate_state):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    module = load_benchmark("vs_trl")
    with pytest.raises(SystemExit):
        module.main(["--quick", "--out", str(tmp_path), "--family", "no_such_family"])
    assert "unknown environment family 'no_such_family'" in capsys.readouterr().err
    assert module.main(["--quick", "--out", str(tmp_path)]) == 0
    folder = tmp_path / "error_recovery"
    result = json.loads((folder / "result.json").read_text())
    runs = {run["trainer"]: run for run in result["runs"]}
    assert set(runs) == {"tracegym", "trl"}
    assert runs["trl"]["train_seeds"] == runs["tracegym"]["train_seeds"] and len(runs["trl"]["train_seeds"]) == 1
    assert runs["trl"]["rollouts"] == runs["tracegym"]["rollouts"] == 2
    for clock in ("wall", "cpu"):
        assert result["seconds_per_step"][clock]["tracegym"] > 0 and result["trl_over_tracegym"][clock] > 0
    assert result["comparison"]["tracegym_minus_trl"]["greedy_success"]["n"] == 3
    assert "TRL / tracegym" in capsys.readouterr().out
    trained = (folder / "trl_0" / "run.json").read_bytes()
    assert module.main(["--quick", "--out", str(tmp_path)]) == 0
    assert (folder / "trl_0" / "run.json").read_bytes() == trained, "a rerun reuses the finished runs"
