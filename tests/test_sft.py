"""SFT warm start: assistant-only masks of our chat format, and a short real SFTTrainer run."""

from __future__ import annotations

import functools

import pytest
import torch
from adapters_lookup_env import LookupEnv
from peft import PeftModel

from tracegym.adapters.config import WarmStartConfig
from tracegym.adapters.sft import dialogue_tokens, warm_start
from tracegym.models import tiny_model
from tracegym.synth_envs.base import play


def test_assistant_mask_covers_exactly_the_assistant_turns():
    model, tokenizer = tiny_model()
    env = LookupEnv()
    messages, _ = play(env, 5, env.oracle(5))
    tokens = dialogue_tokens(tokenizer, messages)
    ids, mask = tokens["input_ids"], tokens["assistant_masks"]
    assert len(ids) == len(mask)
    trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    assert trained == "".join(action + "<|im_end|>" for action in env.oracle(5))
    untrained = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
    assert "<tool_response>" in untrained and env.reset(5) in untrained


def test_warm_start_lowers_loss_and_saves_a_loadable_adapter(tmp_path):
    model, tokenizer = tiny_model()
    config = WarmStartConfig(dialogues=16, steps=4, batch_size=4, learning_rate=1e-2, lora_rank=4)
    peft_model, metrics = warm_start(model, tokenizer, [LookupEnv], range(100, 116), config, tmp_path / "sft")
    assert metrics["dialogues"] == 16
    assert metrics["final_loss"] < metrics["first_loss"]
    assert (tmp_path / "sft" / "adapter_config.json").is_file()
    assert (tmp_path / "sft" / "adapter_model.safetensors").is_file()
    ids = torch.tensor([dialogue_tokens(tokenizer, play(LookupEnv(), 1, LookupEnv().oracle(1))[0])["input_ids"]])
    peft_model.cpu().eval()  # trained on the accelerator's device; compared here on the CPU
    with torch.no_grad():
        expected = peft_model(input_ids=ids).logits
        base, _ = tiny_model()
        loaded = PeftModel.from_pretrained(base, str(tmp_path / "sft")).eval()
        assert torch.allclose(loaded(input_ids=ids).logits, expected, atol=1e-5)
        with loaded.disable_adapter():
            assert not torch.allclose(loaded(input_ids=ids).logits, expected, atol=1e-3)


def test_warm_start_for_calibration_covers_every_rung():
    from tracegym.adapters.sft import oracle_dataset
    from tracegym.adapters.train import ladder_factories
    from tracegym.schema import EnvSpec
    from tracegym.synth_envs.registry import get_family

    _, tokenizer = tiny_model()
    spec = EnvSpec(capability="tool_calling_precision", family="tool_calling_precision", knobs={"n_attendees": 3})
    factories = ladder_factories(spec)
    ladder = get_family("tool_calling_precision").ladder
    assert [f().knobs() for f in factories] == [
        {**get_family("tool_calling_precision").Config().__dict__, **rung} for rung in ladder
    ]
    rows = oracle_dataset(factories, range(len(ladder)), tokenizer)
    attendees = [tokenizer.decode(row["input_ids"]).count('"find_employee", "arguments"') for row in rows]
    assert attendees[0] == 1 and attendees[-1] == ladder[-1]["n_attendees"]  # one rung per dialogue, in order


def test_a_detached_prompt_keeps_the_loss_and_still_learns(tmp_path):
    """The first step sees the same weights either way, so its loss must match the plain step's
    (rows of unequal length and different prompts, right-padded, in one batch); later steps differ
    only in the gradient."""
    from tracegym.adapters.sft import oracle_dataset
    from tracegym.synth_envs.registry import make_env

    factories = [LookupEnv, functools.partial(make_env, "tool_calling_precision")]
    runs = {}
    for detach in (False, True):
        model, tokenizer = tiny_model()
        config = WarmStartConfig(
            dialogues=4, steps=4, batch_size=2, learning_rate=1e-2, lora_rank=4, detach_prompt=detach
        )
        _, runs[detach] = warm_start(model, tokenizer, factories, range(4), config, tmp_path / f"sft-{detach}")
    assert len({len(ids) for ids in oracle_dataset(factories, range(4), tokenizer)["input_ids"]}) > 1  # padded batches
    assert abs(runs[True]["first_loss"] - runs[False]["first_loss"]) < 1e-4
    assert runs[True]["final_loss"] < runs[True]["first_loss"]


def test_a_detached_prompt_refuses_gradient_checkpointing():
    with pytest.raises(ValueError, match="gradient_checkpointing"):
        WarmStartConfig(detach_prompt=True, gradient_checkpointing=True)


def test_an_interrupted_warm_start_resumes_from_its_checkpoint(tmp_path):
    """With save_every, a rerun continues from the latest checkpoint: the same adapter as one
    uninterrupted run, and only the steps left are trained."""
    config = WarmStartConfig(dialogues=8, steps=4, batch_size=2, learning_rate=1e-2, lora_rank=4, save_every=2)
    whole, _ = warm_start(*tiny_model(), [LookupEnv], range(100, 108), config, tmp_path / "whole")
    first = WarmStartConfig(**{**config.__dict__, "steps": 2})
    warm_start(*tiny_model(), [LookupEnv], range(100, 108), first, tmp_path / "split")
    assert (tmp_path / "split" / "checkpoints" / "checkpoint-2").is_dir()
    resumed, metrics = warm_start(*tiny_model(), [LookupEnv], range(100, 108), config, tmp_path / "split")
    assert metrics["resumed_from_step"] == 2
    for (name, a), (_, b) in zip(whole.named_parameters(), resumed.named_parameters()):
        if "lora_" in name:
            assert torch.allclose(a.detach().cpu(), b.detach().cpu(), atol=1e-5), name
