"""The rollout engine and GRPO update of commit 1b8c06d (before KV caches, shared prompts and the
packed update), read from git, as the baseline of benchmarks/rollout.py and benchmarks/grpo_step.py.

The package keeps no copy of the old code: `old_module` compiles a file from `git show`. The
baseline runs on the new engine's own episodes, so both sides do the same work:
`replay_rollouts` feeds the old backend every turn's contexts exactly as the new engine's episodes
had them (same live episodes per turn, same batch), each turn with the longest turn the new engine
sampled as its token budget (the old engine then decodes at most as many steps); `baseline_trainer`
puts the old reference scoring and the old update (an old-log-prob pass, then every episode's
whole sequence left-padded) onto today's trainer class.
"""

from __future__ import annotations
import __future__

import ast
import re
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

from tracegym.generation import SamplingConfig
from tracegym.rollout import Episode

BASELINE = "1b8c06d"
REPO = Path(__file__).resolve().parents[1]
_UPDATE_METHODS = ("_chunks", "_old_logprobs", "update")


def old_source(path: str) -> str:
    """`path` as it was at BASELINE (needs the checkout's git history)."""
    result = subprocess.run(["git", "-C", str(REPO), "show", f"{BASELINE}:{path}"], capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"benchmarks/baseline.py: cannot read {path} at commit {BASELINE}: {result.stderr.strip()}")
    return result.stdout


def old_module(path: str) -> types.ModuleType:
    """A fresh module compiled from `path` at BASELINE (its imports resolve to today's package)."""
    name = "baseline_" + path.replace("/", "_").removesuffix(".py")
    module = types.ModuleType(name)
    module.__file__ = f"{BASELINE}:{path}"
    sys.modules[name] = module  # dataclasses look their module up while the class body runs
    exec(compile(old_source(path), module.__file__, "exec"), module.__dict__)
    return module


def old_backend(model, tokenizer, batch_size: int) -> Any:
    """BASELINE's HFBackend: transformers `generate` over whole contexts, left-padded, sorted by length."""
    return old_module("tracegym/generation.py").HFBackend(model, tokenizer, batch_size=batch_size)


def replay_rollouts(backend: Any, episodes: list[Episode], params: SamplingConfig) -> int:
    """Run `backend` on every turn's contexts of `episodes` (see the module docstring); returns the
    tokens it sampled."""
    sampled = 0
    for turn in range(max(max(e.turn_ids) for e in episodes) + 1):
        live = [e for e in episodes if turn in e.turn_ids]
        contexts = [e.prompt_ids + e.completion_ids[: e.turn_ids.index(turn)] for e in live]
        budget = max(e.turn_ids.count(turn) for e in live)
        seed = None if params.seed is None else params.seed + 7919 * turn  # BASELINE's turn seeds
        completions = backend.generate(contexts, replace(params, max_new_tokens=budget, seed=seed))
        sampled += sum(len(c.token_ids) for c in completions)
    return sampled


def baseline_trainer(trainer_class: type) -> type:
    """A subclass of `trainer_class` (today's TurnGRPOTrainer) whose `update(batch)` is BASELINE's; its
    `old_batch(episodes, advantages)` builds that update's left-padded batch, and its `advantages`
    scores the reference with BASELINE's code (one packed forward pass per episode, its prompt
    included; BASELINE's reference was the base model, as today's is without a warm start)."""
    import numpy as np
    import torch

    from tracegym.adapters import grpo

    # BASELINE read the sampling temperature from TurnGRPOConfig; today it is the trainer's RolloutConfig
    source = re.sub(r"(self\.)?config\.temperature", "self.rollout_config.temperature", old_source("adapters/grpo.py"))
    tree = ast.parse(source)
    old_class = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "TurnGRPOTrainer")
    methods = [node for node in old_class.body if isinstance(node, ast.FunctionDef) and node.name in _UPDATE_METHODS]
    policy_loss = old_module("adapters/policy_loss.py")
    namespace: dict[str, Any] = {**vars(policy_loss), "torch": torch, "np": np}
    code = compile(
        ast.Module(body=methods, type_ignores=[]),
        f"{BASELINE}:adapters/grpo.py",
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    exec(code, namespace)

    def old_batch(self: Any, episodes: list[Episode], advantages: torch.Tensor) -> Any:
        return policy_loss.episode_batch(episodes, advantages, self.pad_id)

    old_scoring = old_module("adapters/reference_scoring.py").reference_scores

    def advantages(self: Any, episodes: list[Episode]) -> torch.Tensor:
        with mock.patch.object(grpo, "reference_scores", old_scoring):
            return trainer_class.advantages(self, episodes)

    members = {name: namespace[name] for name in _UPDATE_METHODS}
    return type("BaselineGRPOTrainer", (trainer_class,), {**members, "old_batch": old_batch, "advantages": advantages})
