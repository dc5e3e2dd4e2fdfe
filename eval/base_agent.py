"""The base agent of the loop: the policy model warm-started on oracle dialogues of the target's
train split, its LoRA merged, saved as a plain model folder that every later stage loads by path
(capability adapters and plain GRPO train a fresh LoRA on it; the router mixes over it).

The warm start is deliberately short (`BaseAgentConfig`): an agent that solves every train task,
or none, gives the diagnosis no contrast between successes and failures. The dialogues are those
of the first `dialogues` train seeds, whose kinds take turns (seven seeds hold one task of each).

A planted gap (`BaseAgentConfig.gap`, a capability): the dialogues of tasks whose kind exercises it
show its characteristic mistake instead of the oracle (`tracegym.eval.target.planted`), so the
base agent lacks that capability by construction and keeps the others; `base_agent.json` records
the gap and which train seeds showed the mistake.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tracegym.adapters.sft import warm_start
from tracegym.adapters.train import load_base
from tracegym.errors import UserError
from tracegym.eval.config import BaseAgentConfig
from tracegym.eval.target import TargetConfig
from tracegym.eval.target.planted import GappedTarget, demonstration

MODEL_DIR = "model"
METRICS_FILE = "base_agent.json"


def make_base_agent(model_name: str, config: BaseAgentConfig, target: TargetConfig, out_dir: Path) -> list[Path]:
    """Write the base agent into `out_dir/model` and how it was made into `out_dir/base_agent.json`;
    returns the files written (the stage's artifacts)."""
    model, tokenizer = load_base(model_name)
    made: dict[str, Any] = {"model": model_name, "gap": config.gap, "warm_start": None}
    if config.enabled:
        if not 1 <= config.dialogues <= target.train_tasks:
            raise UserError(
                f"base_agent.dialogues must be in 1..{target.train_tasks} (the train split), got {config.dialogues}"
            )
        # the demonstrations play against the scripted user; the gap's tasks show its mistake
        factory = functools.partial(GappedTarget, target, config.gap)
        seeds = range(config.dialogues)
        peft_model, metrics = warm_start(
            model, tokenizer, [factory], seeds, config, out_dir / "warm_start", require_success=not config.gap
        )
        model = peft_model.merge_and_unload()
        env = factory()
        slipped = [seed for seed in seeds if demonstration(env.task(seed), config.gap) != env.task(seed).oracle]
        made["warm_start"] = {
            **metrics,
            "config": asdict(config),
            "train_seeds": [0, config.dialogues],
            "gap_seeds": slipped,
        }
    folder = out_dir / MODEL_DIR
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (out_dir / METRICS_FILE).write_text(json.dumps(made, indent=1))
    return [out_dir / METRICS_FILE, *sorted(p for p in folder.iterdir() if p.is_file())]
