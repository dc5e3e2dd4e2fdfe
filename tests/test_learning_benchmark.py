"""2-step smoke of benchmarks/learning.py on the tiny model: the whole comparison runs end to end."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "learning.py"


def test_learning_benchmark_quick(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("learning_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert [(r["credit"], len(r["train_reward"])) for r in result["runs"]] == [("trace", 2), ("grpo", 2)]
    assert (tmp_path / "warm_start" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "trace_0" / "checkpoint" / "trainer_state.pt").is_file()
    assert "RATIO trace / plain GRPO" in capsys.readouterr().out
