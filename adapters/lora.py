"""LoRA setup shared by the SFT warm start and the GRPO trainer (docs/method.md, "GRPO").

Defaults: rank 16 on every attention and MLP projection (q, k, v, o, gate, up, down), alpha = 2 ×
rank, no dropout (dropout would make the recomputed "old" log-probs of GRPO differ from the
policy that sampled). The base weights stay frozen; only the LoRA matrices train.
"""

from __future__ import annotations

from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import PreTrainedModel

LORA_TARGETS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
POLICY_ADAPTER = "default"  # PEFT's name of the adapter attach_lora creates or loads: the one trained
REFERENCE_ADAPTER = "reference"  # a frozen copy of the starting adapter: π_ref of turn credit


def lora_config(rank: int = 16) -> LoraConfig:
    """The project's LoRA config: `rank` (default 16) on LORA_TARGETS, alpha 2·rank, dropout 0."""
    return LoraConfig(
        r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=list(LORA_TARGETS), task_type="CAUSAL_LM"
    )


def attach_lora(
    model: PreTrainedModel, rank: int = 16, adapter_dir: str | Path | None = None, seed: int = 0
) -> PeftModel:
    """A trainable LoRA policy on `model`: loaded from `adapter_dir` (e.g. a warm start) or freshly
    initialised with torch seed `seed` (PEFT draws lora_A at random and sets lora_B to zero)."""
    if adapter_dir is not None:
        return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)
    torch.manual_seed(seed)
    return get_peft_model(model, lora_config(rank))


def add_reference(policy: PeftModel, adapter_dir: str | Path) -> PeftModel:
    """Load `adapter_dir` (the adapter the policy started from) a second time as the frozen
    REFERENCE_ADAPTER; the policy adapter stays active and trainable. Returns `policy`."""
    policy.load_adapter(str(adapter_dir), adapter_name=REFERENCE_ADAPTER, is_trainable=False)
    return policy


def save_policy(model: PeftModel, out_dir: str | Path) -> None:
    """Save the trained adapter only (PEFT layout, at the top of `out_dir`), never the reference."""
    model.save_pretrained(str(out_dir), selected_adapters=[POLICY_ADAPTER])


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies of the trainable (LoRA) parameters by name."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
