"""Killing training after a checkpoint and resuming in a new trainer reaches the same state as an
uninterrupted run: adapter weights, optimizer state, seed cursor and log."""

from __future__ import annotations

import shutil

import pytest
import torch
from adapters_lookup_env import ProseEnv, chatty_tiny_model

from tracegym.adapters.checkpoint import find_checkpoint, save_checkpoint
from tracegym.adapters.config import CreditConfig, TurnGRPOConfig
from tracegym.adapters.grpo import CHECKPOINT_DIR, TurnGRPOTrainer, read_log
from tracegym.adapters.lora import attach_lora, trainable_state
from tracegym.config import RolloutConfig


def _trainer(out) -> TurnGRPOTrainer:
    model, tokenizer = chatty_tiny_model()
    config = TurnGRPOConfig(
        steps=4,
        save_every=2,
        groups_per_step=1,
        group_size=4,
        learning_rate=1e-2,
        lora_rank=4,
        mini_batches=2,
        hint_fraction=0.25,
        credit=CreditConfig(credit="trace"),
    )
    rollout = RolloutConfig(max_new_tokens=10)
    return TurnGRPOTrainer(attach_lora(model, rank=4, seed=config.seed), tokenizer, ProseEnv, config, rollout, out)


def _without_time(records):
    return [{k: v for k, v in r.items() if not k.endswith("_seconds")} for r in records]


@pytest.fixture
def deterministic_kernels():
    """Bit-reproducible kernels where the device has non-deterministic ones (CUDA's atomic adds and
    its fused attention backward passes, with CUBLAS_WORKSPACE_CONFIG set in conftest); the CPU's
    already are."""
    fused = torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled()
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.use_deterministic_algorithms(False)
    torch.backends.cuda.enable_flash_sdp(fused[0])
    torch.backends.cuda.enable_mem_efficient_sdp(fused[1])


def test_kill_and_resume_equals_uninterrupted_run(tmp_path, deterministic_kernels):
    straight = _trainer(tmp_path / "straight")
    straight.train(progress=False)

    killed = _trainer(tmp_path / "resumed")
    killed.train(progress=False, until=3)  # checkpoint at step 2; step 3 is lost with the process
    assert torch.load(tmp_path / "resumed" / CHECKPOINT_DIR / "trainer_state.pt", weights_only=False)["step"] == 2
    del killed

    resumed = _trainer(tmp_path / "resumed")
    assert resumed.resume() and resumed.step == 2
    assert [r["step"] for r in read_log(tmp_path / "resumed")] == [1, 2]
    resumed.train(progress=False)

    assert resumed.step == straight.step == 4 and resumed.cursor == straight.cursor
    assert any(r["kept_groups"] for r in read_log(tmp_path / "straight")), "no update happened: the test shows nothing"
    expected, actual = trainable_state(straight.policy), trainable_state(resumed.policy)
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.allclose(expected[name], actual[name], rtol=0, atol=1e-7), name
    for a, b in zip(
        straight.optimizer.state_dict()["state"].values(), resumed.optimizer.state_dict()["state"].values()
    ):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.allclose(a[key], b[key], rtol=0, atol=1e-7), key
    assert _without_time(read_log(tmp_path / "resumed")) == _without_time(read_log(tmp_path / "straight"))


def test_interrupted_checkpoint_swap_keeps_the_previous_checkpoint(tmp_path):
    trainer = _trainer(tmp_path)
    path = tmp_path / CHECKPOINT_DIR
    save_checkpoint(path, trainer.policy, trainer.optimizer, {"step": 2, "cursor": 5})
    path.rename(path.with_name(path.name + ".old"))  # killed between the two renames of the next save
    (tmp_path / (CHECKPOINT_DIR + ".partial")).mkdir()
    found = find_checkpoint(path)
    assert found == path.with_name(path.name + ".old")
    assert trainer.resume() and (trainer.step, trainer.cursor) == (2, 5)
    shutil.rmtree(found)
    assert find_checkpoint(path) is None


def test_a_run_killed_before_its_first_checkpoint_restarts_with_an_empty_log(tmp_path):
    killed = _trainer(tmp_path)
    killed.train(progress=False, until=1)  # step 1 logged, no checkpoint yet (save_every=2)
    assert [r["step"] for r in read_log(tmp_path)] == [1] and find_checkpoint(tmp_path / CHECKPOINT_DIR) is None
    restarted = _trainer(tmp_path)
    assert not restarted.resume() and restarted.step == 0
    assert read_log(tmp_path) == [], "the lost step's record would be counted twice once the run starts over"
