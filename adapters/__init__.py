"""Capability adapters: LoRA training with SFT warm start and multi-turn GRPO with TRACE turn credit.

- `lora`: PEFT LoRA setup; `sft`: warm start on oracle dialogues (TRL SFTTrainer);
- `credit`: outcome advantages and turn credit (papers/TRACE.md §2); `reference_scoring`: the
  gold answer's log-prob after every boundary prefix in one packed forward pass;
- `policy_loss`: token batches and the clipped surrogate; `grpo`: TurnGRPOConfig and the trainer;
- `checkpoint`: atomic checkpoints with exact resume; `heldout`: held-out reward with intervals;
- `artifacts`: PEFT adapter, config, log, learning curve; `train`: one adapter end to end
  (warm start, calibration, GRPO); `cli`: `tracegym train`.
"""
