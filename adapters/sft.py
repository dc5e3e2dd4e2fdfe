"""SFT warm start: teach a policy the tool-call format from oracle trajectories of an environment.

The embedded SmolLM2-135M emits no valid tool call out of the box, so GRPO has no
reward signal until it has seen the format. `warm_start` plays the environment's oracle on
`dialogues` training seeds (`synth_envs.base.play`), tokenises each dialogue with the chat template
and trains a LoRA on the assistant turns only, with TRL's `SFTTrainer`.

Detached prompt (`detach_prompt`): every dialogue of a target opens with the same long system prompt,
about half its tokens. `_PromptDetachedTrainer` encodes a batch's tokens before its first learned one
without gradient and feeds the rest over their cache, so the backward pass covers only the dialogue.

Masks: our chat template has no `{% generation %}` markers, so TRL's `assistant_only_loss` cannot
find the assistant spans by itself. We tokenise the dialogues ourselves and hand SFTTrainer an
already-tokenised dataset with an `assistant_masks` column, which it folds into `labels` (-100 on
system, user and observation tokens). The masked-in tokens are exactly what the policy samples at
rollout time: each assistant turn's text and its closing `<|im_end|>`.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from datasets import Dataset, concatenate_datasets
from peft import PeftModel
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.trainer_utils import get_last_checkpoint
from trl import SFTConfig, SFTTrainer

from tracegym.adapters.config import WarmStartConfig
from tracegym.adapters.lora import lora_config
from tracegym.generation import render_chat
from tracegym.precision import use_bf16
from tracegym.schema import Message
from tracegym.synth_envs.base import Environment, play

CHECKPOINTS = "checkpoints"  # the warm start's resumable checkpoints, under its output folder

logger = logging.getLogger(__name__)


def dialogue_tokens(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message]) -> dict[str, list[int]]:
    """`input_ids` of a whole dialogue and `assistant_masks` (1 on each assistant turn's tokens
    through its end-of-turn token, 0 elsewhere)."""
    input_ids = render_chat(tokenizer, messages, add_generation_prompt=False)
    mask = [0] * len(input_ids)
    eos = tokenizer.eos_token_id
    for index, message in enumerate(messages):
        if message.role != "assistant":
            continue
        start = len(render_chat(tokenizer, messages[:index], add_generation_prompt=True))
        through = render_chat(tokenizer, messages[: index + 1], add_generation_prompt=False)
        if through[:start] != input_ids[:start] or input_ids[: len(through)] != through:
            raise ValueError("chat template does not tokenise dialogue prefixes consistently")
        end = start + through[start:].index(eos) + 1
        mask[start:end] = [1] * (end - start)
    return {"input_ids": input_ids, "assistant_masks": mask}


class _PromptDetachedTrainer(SFTTrainer):
    """SFTTrainer whose loss runs the batch's prompt (the columns before the first one with a label,
    less the one that predicts it) under `no_grad` and the remaining columns on its cache. Rows are
    right-padded, so those columns are real tokens of every row; the loss is unchanged."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        learned = (inputs["labels"] != -100).any(dim=0).nonzero()
        split = int(learned[0]) - 1 if len(learned) else 0
        if split > 0:
            with torch.no_grad():
                prompt = model(
                    input_ids=inputs["input_ids"][:, :split],
                    attention_mask=inputs["attention_mask"][:, :split],
                    use_cache=True,
                    logits_to_keep=1,
                )
            # every per-token tensor keeps its columns after the prompt; the attention mask covers the cache too
            inputs = {
                key: value[:, split:]
                if key != "attention_mask" and torch.is_tensor(value) and value.dim() == 2
                else value
                for key, value in inputs.items()
            }
            inputs["cache"] = prompt.cache
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


@dataclass(frozen=True)
class Rehearsal:
    """Dialogues an adapter's warm start also trains on, so that it keeps what the policy already
    does elsewhere: the demonstrations of `seeds` in environments from `env_factories` (as in
    `oracle_dataset`, played whatever they earn; the loop's base agent's own, its gap included)."""

    env_factories: Sequence[Callable[[], Environment]]
    seeds: Sequence[int]


def oracle_dataset(
    env_factories: Sequence[Callable[[], Environment]],
    seeds: Sequence[int],
    tokenizer: PreTrainedTokenizerBase,
    require_success: bool = True,
) -> Dataset:
    """One tokenised oracle dialogue per seed, checked to end its episode and, unless
    `require_success` is off (demonstrations with planted mistakes), to earn reward 1.0; seed i is
    played in an environment from factory i mod len(env_factories), e.g. one per difficulty rung."""
    envs = [factory() for factory in env_factories]
    rows = []
    for index, seed in enumerate(seeds):
        env = envs[index % len(envs)]
        messages, result = play(env, seed, env.oracle(seed))
        if not result.ended or (require_success and result.reward != 1.0):
            raise AssertionError(f"{env.name}: oracle earned {result.reward} on seed {seed} (ended: {result.ended})")
        rows.append(dialogue_tokens(tokenizer, messages))
    return Dataset.from_list(rows)


def warm_start(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    env_factories: Sequence[Callable[[], Environment]],
    seeds: Sequence[int],
    config: WarmStartConfig,
    out_dir: str | Path,
    require_success: bool = True,
    rehearsal: Rehearsal | None = None,
) -> tuple[PeftModel, dict[str, Any]]:
    """Train a LoRA on oracle dialogues of `seeds` (spread over `env_factories` and checked as in
    `oracle_dataset`), and on `rehearsal`'s dialogues when given (shuffled in with them); saves the
    adapter to `out_dir` and returns the PEFT model and metrics
    (first/final loss, seconds per step, dialogues, mean tokens, tokens trained on over all
    processes, the step it resumed from). With
    `config.save_every`, a checkpoint in `out_dir/checkpoints` every that many steps, from which a
    rerun resumes. Under N processes each step still trains `config.batch_size` dialogues, split
    evenly (ValueError when N does not divide it)."""
    out_dir = Path(out_dir)
    processes = PartialState().num_processes
    if config.batch_size % processes:
        raise ValueError(
            f"the warm start's batch_size {config.batch_size} does not split evenly over {processes} processes: "
            f"set it (--warm-start-batch-size; --base-agent-batch-size for a target's base agent) to a multiple "
            f"of {processes}"
        )
    dataset = oracle_dataset(env_factories, list(seeds)[: config.dialogues], tokenizer, require_success)
    if rehearsal is not None:
        rehearsed = oracle_dataset(rehearsal.env_factories, rehearsal.seeds, tokenizer, require_success=False)
        dataset = concatenate_datasets([dataset, rehearsed])
    untrained = sum(1 not in mask[: config.max_length] for mask in dataset["assistant_masks"])
    if untrained:  # the SFT trainer drops them: their assistant turns all lie past the cut
        logger.warning(
            "warm start: %d of %d dialogues have no assistant token within max_length %d and are not trained on; "
            "raise max_length to train on them",
            untrained,
            len(dataset),
            config.max_length,
        )
    scratch = tempfile.TemporaryDirectory(prefix="tracegym-sft-")
    checkpoints = out_dir / CHECKPOINTS if config.save_every else Path(scratch.name)
    last = get_last_checkpoint(str(checkpoints)) if config.save_every and checkpoints.is_dir() else None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args = SFTConfig(
        output_dir=str(checkpoints),
        max_steps=config.steps,
        per_device_train_batch_size=config.batch_size // processes,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_length=config.max_length,
        logging_steps=1,
        save_strategy="steps" if config.save_every else "no",
        save_steps=config.save_every or 500,
        save_total_limit=1,
        report_to="none",
        bf16=use_bf16(config.bf16, device),
        use_cpu=device == "cpu",  # transformers refuses bf16 on CPU without it
        gradient_checkpointing=config.gradient_checkpointing,
        seed=config.seed,
        data_seed=config.seed,
        dataset_num_proc=None,
        disable_tqdm=False,
    )
    trainer_class = _PromptDetachedTrainer if config.detach_prompt else SFTTrainer
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(config.lora_rank),
    )
    started = time.perf_counter()
    with scratch:
        trainer.train(resume_from_checkpoint=last)
    elapsed = time.perf_counter() - started
    logged = trainer.state.log_history
    losses = [entry["loss"] for entry in logged if "loss" in entry]
    peft_model: PeftModel = trainer.model
    if trainer.accelerator.is_main_process:
        peft_model.save_pretrained(str(out_dir))
    trainer.accelerator.wait_for_everyone()
    metrics = {
        "config": asdict(config),
        "dialogues": len(dataset),
        "rehearsed_dialogues": len(rehearsal.seeds) if rehearsal else 0,
        "untrained_dialogues": untrained,
        "mean_tokens": sum(len(ids) for ids in dataset["input_ids"]) / max(len(dataset), 1),
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "trained_tokens": next(
            (e["num_tokens"] for e in reversed(trainer.state.log_history) if "num_tokens" in e), None
        ),
        "seconds_per_step": elapsed / max(config.steps, 1),
        "resumed_from_step": int(Path(last).name.split("-")[-1]) if last else 0,
    }
    first, final = (
        f"{loss:.3f}" if loss is not None else "not logged" for loss in (metrics["first_loss"], metrics["final_loss"])
    )
    logger.info("warm start: loss %s -> %s, %.2f s/step", first, final, metrics["seconds_per_step"])
    return peft_model, metrics
