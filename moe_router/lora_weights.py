"""Reading a standard PEFT LoRA folder (adapter_config.json + adapter_model.safetensors) into
plain tensors, refusing what the routed mixture cannot reproduce exactly.

Supported: plain LoRA on `nn.Linear` modules, any rank per module (`rank_pattern`), scaling
lora_alpha / r (or lora_alpha / sqrt(r) with `use_rslora`). Refused, with one line naming the
file and the setting: DoRA, LoRA biases, `alpha_pattern`, `modules_to_save`, trainable tokens,
embedding or parameter LoRAs, and any other tensor than `lora_A` / `lora_B` weights.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, load_file

from tracegym.errors import UserError

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
# PEFT saves `base_model.model.<module path>.lora_A.weight`; `.default` appears in older saves.
_KEY = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<part>[AB])(?:\.default)?\.weight$")
# settings that change what a LoRA computes: the only values the mixture reproduces
_REQUIRED: dict[str, tuple[Any, ...]] = {
    "peft_type": ("LORA",),
    "use_dora": (False, None),
    "bias": ("none", None),
    "lora_bias": (False, None),
    "fan_in_fan_out": (False, None),
    "alpha_pattern": ({}, None),
    "modules_to_save": (None, []),
    "trainable_token_indices": (None, {}, []),
    "target_parameters": (None, []),
    "alora_invocation_tokens": (None, []),
    "use_qalora": (False, None),
    "use_bdlora": (None, False),
    "layer_replication": (None, []),
}


@dataclass(frozen=True)
class LoraPair:
    """One module's LoRA: `A` (rank, in_features), `B` (out_features, rank) and its `scaling`."""

    A: torch.Tensor
    B: torch.Tensor
    scaling: float


@dataclass(frozen=True)
class AdapterWeights:
    """A LoRA adapter as tensors: module path (e.g. `model.layers.0.self_attn.q_proj`) -> pair."""

    name: str
    path: Path
    modules: dict[str, LoraPair]


def read_adapter_config(folder: Path, content: bytes | None = None) -> dict[str, Any]:
    """The adapter's `adapter_config.json` (its `content` when the caller read it already), checked
    for settings the mixture cannot reproduce."""
    path = folder / CONFIG_FILE
    try:
        config = json.loads(path.read_bytes() if content is None else content)
    except OSError as error:
        raise UserError(f"{path}: cannot read adapter config: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise UserError(f"{path}: not valid JSON: {error.msg} (line {error.lineno})") from None
    if not isinstance(config, dict):
        raise UserError(f"{path}: an adapter config is a JSON object")
    for key, allowed in _REQUIRED.items():
        if key in config and config[key] not in allowed:
            raise UserError(
                f"{path}: unsupported LoRA setting {key}={config[key]!r} (the routed mixture supports plain LoRA)"
            )
    for key in ("r", "lora_alpha"):
        if not isinstance(config.get(key), (int, float)) or isinstance(config.get(key), bool) or config[key] <= 0:
            raise UserError(f"{path}: '{key}' must be a positive number, got {config.get(key)!r}")
    return config


def read_adapter(
    folder: str | Path, name: str | None = None, files: Mapping[str, bytes] | None = None
) -> AdapterWeights:
    """Load the LoRA matrices of the PEFT folder `folder` (named `name`, default the folder name).
    `files`: its files' contents by file name, when the caller read them itself (a server reading
    them through checked handles); a file missing from them is missing from the folder."""
    folder = Path(folder)
    if files is not None and CONFIG_FILE not in files:
        raise UserError(f"{folder / CONFIG_FILE}: cannot read adapter config: No such file or directory")
    config = read_adapter_config(folder, None if files is None else files[CONFIG_FILE])
    path = folder / WEIGHTS_FILE
    try:
        if files is None:
            tensors = load_file(str(path))
        elif WEIGHTS_FILE in files:
            tensors = load(files[WEIGHTS_FILE])
        else:
            raise FileNotFoundError(f"No such file or directory: {path}")
    except (OSError, SafetensorError) as error:
        raise UserError(f"{path}: cannot read adapter weights: {error}") from None
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = _KEY.match(key)
        if match is None:
            raise UserError(f"{path}: unsupported tensor '{key}' (only lora_A/lora_B weights of linear layers)")
        parts.setdefault(match["module"], {})[match["part"]] = tensor
    if not parts:
        raise UserError(f"{path}: no LoRA weights")
    modules = {}
    for module, pair in sorted(parts.items()):
        if set(pair) != {"A", "B"}:
            raise UserError(f"{path}: {module} has lora_{''.join(sorted(pair))} but not both lora_A and lora_B")
        a, b = pair["A"], pair["B"]
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1]:
            raise UserError(f"{path}: {module}: lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)} do not chain")
        rank = a.shape[0]
        scaling = config["lora_alpha"] / (math.sqrt(rank) if config.get("use_rslora") else rank)
        modules[module] = LoraPair(a.float(), b.float(), float(scaling))
    return AdapterWeights(name or folder.name, folder, modules)
