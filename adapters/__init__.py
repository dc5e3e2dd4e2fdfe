"""Capability adapters: LoRA training with SFT warm start and multi-turn GRPO with TRACE turn credit.

- `lora`: PEFT LoRA setup; `sft`: warm start on oracle dialogues (TRL SFTTrainer);
- `credit`: outcome advantages and turn credit (docs/method.md, "Turn credit"); `reference_scoring`: the
  gold answer's log-prob after every boundary prefix in one packed forward pass;
- `policy_loss`: token batches and the clipped surrogate; `grpo`: the trainer (`TurnGRPOTrainer`);
- `checkpoint`: atomic checkpoints with exact resume; `heldout`: held-out reward with intervals;
- `artifacts`: PEFT adapter, config, log, learning curve; `train`: one adapter end to end
  (warm start, calibration, GRPO); `config`: the stage's configs; `train_cli`: `tracegym train`.
"""
