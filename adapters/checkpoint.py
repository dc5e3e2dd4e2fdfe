"""Training checkpoints with exact resume, written atomically.

A checkpoint folder holds the LoRA weights (`adapter/`, standard PEFT layout), and
`trainer_state.pt`: the optimizer state, the step, the environment seed cursor, and the python,
numpy and torch RNG states. It is written to `<name>.partial` and swapped in with renames, so a
run killed at any moment leaves either the previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from peft import PeftModel, set_peft_model_state_dict
from safetensors.torch import load_file

from tracegym.adapters.lora import POLICY_ADAPTER, save_policy

STATE_FILE = "trainer_state.pt"


def rng_state() -> dict[str, Any]:
    """The python, numpy and torch (CPU, and CUDA when present) RNG states."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    path: str | Path, model: PeftModel, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Write adapter + optimizer + `state` (step, cursor, ...) + RNG states to `path` atomically."""
    path = Path(path)
    partial, old = path.with_name(path.name + ".partial"), path.with_name(path.name + ".old")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    save_policy(model, partial / "adapter")
    torch.save({**state, "optimizer": optimizer.state_dict(), "rng": rng_state()}, partial / STATE_FILE)
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        path.rename(old)
    partial.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def find_checkpoint(path: str | Path) -> Path | None:
    """The complete checkpoint at `path`, or the previous one if a swap was interrupted; else None."""
    path = Path(path)
    for candidate in (path, path.with_name(path.name + ".old")):
        if (candidate / STATE_FILE).is_file():
            return candidate
    return None


def load_checkpoint(path: str | Path, model: PeftModel, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore adapter weights, optimizer state and RNG states from `path`; returns the saved state
    (step, cursor, ...) without the optimizer and RNG entries."""
    path = Path(path)
    weights = load_file(str(path / "adapter" / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(model, weights, adapter_name=POLICY_ADAPTER)
    # only the trained adapter is checkpointed; a frozen reference adapter is loaded from its own folder
    missing = [key for key in result.missing_keys if "lora_" in key and f".{POLICY_ADAPTER}." in key]
    if missing:
        raise ValueError(f"{path}: checkpoint lacks adapter weights {missing[:3]}")
    # onto the CPU in every process, not the saving process's GPU; the optimizer moves its state to its weights
    state = torch.load(path / STATE_FILE, weights_only=False, map_location="cpu")
    optimizer.load_state_dict(state.pop("optimizer"))
    set_rng_state(state.pop("rng"))
    return state
