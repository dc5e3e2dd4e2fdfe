"""Sound GRPO updates (issue 10 item 3): binding-clip counting, whole groups per optimizer step,
flat groups redrawn up to a bound, π_ref = the frozen warm start, batch-independent sampling seeds."""

from __future__ import annotations

from typing import Any

import torch
from adapters_lookup_env import FlatEnv, ProseEnv, chatty_tiny_model

from tracegym.adapters.config import CreditConfig, TurnGRPOConfig
from tracegym.adapters.credit import episode_advantages
from tracegym.adapters.grpo import TurnGRPOTrainer
from tracegym.adapters.lora import POLICY_ADAPTER, REFERENCE_ADAPTER, add_reference, attach_lora, save_policy
from tracegym.adapters.policy_loss import clipped_surrogate
from tracegym.adapters.reference_scoring import score_packed
from tracegym.config import RolloutConfig


def _trainer(tmp_path, env=ProseEnv, model=None, credit="trace", max_new_tokens=12, **overrides) -> TurnGRPOTrainer:
    if model is None:
        base, tokenizer = chatty_tiny_model()
        model = attach_lora(base, rank=4)
    else:
        _, tokenizer = chatty_tiny_model()
    settings: dict[str, Any] = dict(
        steps=1, groups_per_step=1, group_size=4, learning_rate=1e-2, lora_rank=4, save_every=1
    )
    config = TurnGRPOConfig(**{**settings, **overrides}, credit=CreditConfig(credit=credit))
    return TurnGRPOTrainer(
        model, tokenizer, env, config, RolloutConfig(max_new_tokens=max_new_tokens), tmp_path, train_seeds=(0, 100)
    )


def test_clip_fraction_counts_only_tokens_where_the_clip_binds():
    ratios = torch.tensor([[1.5, 1.5, 0.5, 0.5, 1.1, 1.5]])
    advantages = torch.tensor([[1.0, -1.0, -1.0, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 0.0]])  # the last token binds but is not trained
    logprobs = ratios.log().requires_grad_()
    loss, binds = clipped_surrogate(logprobs, torch.zeros_like(ratios), advantages, mask, 0.2, 0.28)
    assert binds.item() == 2, "ρ=1.5 with A>0 and ρ=0.5 with A<0 bind; ρ=1.5 with A<0 or ρ=0.5 with A>0 do not"
    loss.backward()
    no_gradient = (logprobs.grad[0, :5] == 0).tolist()
    assert no_gradient == [True, False, True, False, False], "binding tokens are exactly those without gradient"


def test_each_optimizer_step_trains_whole_groups(tmp_path):
    trainer = _trainer(tmp_path, credit="grpo", mini_batches=2, group_size=4, hint_fraction=0.5)
    episodes = trainer.rollouts([3, 4, 5])
    episodes = [e for i, e in enumerate(episodes) if not (i % 4 == 0 and e.seed == 5)]  # seed 5: a group of 3
    for e, reward in zip(episodes, [0.0, 1.0] * len(episodes)):
        e.reward = reward
    advantages = episode_advantages(episodes, None, trainer.config.credit)
    parts = trainer._step_groups(episodes, advantages)
    assert len(parts) == 2
    seen: dict[tuple[int, ...], int] = {}
    for index, part in enumerate(parts):
        outcome = 0.0
        for group in part:
            prompt = tuple(group.prompt_ids.tolist())
            assert seen.setdefault(prompt, index) == index, "a group is split across optimizer steps"
            first = group.loss_mask.argmax(dim=1)
            outcome += float(group.advantages[torch.arange(len(group)), first].sum())
        assert abs(outcome) < 1e-5, "each step's outcome advantages sum to zero (whole groups)"
    assert len(seen) == 3
    assert len(trainer._step_groups(episodes[:4], advantages[:4])) == 1, "no optimizer step without a group"


class _HalfFlatEnv(ProseEnv):
    """ProseEnv on even seeds; on odd seeds every answer earns 0.5 (flat groups, when no turn is cut
    short: 64 new tokens a turn)."""

    name = "half_flat_test"

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        return (0.5, {}) if self.seed % 2 else super()._score(final_answer)


def test_flat_groups_are_replaced_by_fresh_seeds_up_to_the_bound(tmp_path):
    trainer = _trainer(tmp_path / "half", env=_HalfFlatEnv, max_new_tokens=64, max_redraws=2)
    trainer.cursor = 1  # the step's seed is 1 (flat); the first fresh seed is 2
    drawn: list[list[int]] = []
    rollouts = trainer.rollouts
    trainer.rollouts = lambda seeds: drawn.append(list(seeds)) or rollouts(seeds)
    record = trainer.train_step()
    assert drawn == [[1], [2]], "one flat group, replaced once by the next training seed, then no more draws"
    assert (record["flat_groups"], record["redrawn_groups"], record["kept_groups"], record["rollouts"]) == (1, 1, 1, 8)
    assert record["seeds"] == [1, 2], "the log names every seed drawn, the flat one too"
    assert record["optimizer_steps"] == 1 and record["loss"] is not None
    assert record["reward_mean"] != 0.5, "the logged reward covers the redrawn group too, not only the flat one"

    flat = _trainer(tmp_path / "flat", env=FlatEnv, max_new_tokens=64, max_redraws=2)
    record = flat.train_step()
    assert (record["flat_groups"], record["redrawn_groups"], record["kept_groups"], record["rollouts"]) == (3, 2, 0, 12)
    none = _trainer(tmp_path / "none", env=FlatEnv, max_new_tokens=64, max_redraws=0)
    assert none.train_step()["rollouts"] == 4


def _warm_start(tmp_path):
    """A LoRA with non-zero weights saved as a warm start; returns (its folder, its scores)."""
    base, _ = chatty_tiny_model()
    warm = attach_lora(base, rank=4, seed=1)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in warm.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    save_policy(warm, tmp_path / "warm")
    return tmp_path / "warm", warm


def test_reference_is_the_frozen_warm_start_while_the_policy_trains(tmp_path):
    folder, warm = _warm_start(tmp_path)
    ids, boundaries, gold = list(range(5, 45)), [10, 25, 40], [7, 8, 9]
    with torch.no_grad():
        warm_scores = score_packed(warm.merge_and_unload(), ids, boundaries, gold)
    base, _ = chatty_tiny_model()
    policy = add_reference(attach_lora(base, adapter_dir=folder), folder)
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all(f".{POLICY_ADAPTER}." in n for n in trainable)
    reference = {n: p.detach().clone() for n, p in policy.named_parameters() if f".{REFERENCE_ADAPTER}." in n}
    assert reference

    trainer = _trainer(tmp_path / "run", model=policy, credit="trace", steps=2)
    before = {n: p.detach().cpu().clone() for n, p in policy.named_parameters() if n in trainable}
    records = trainer.train(progress=False)
    policy.cpu()  # trained on the accelerator's device; compared here on the CPU
    assert any(r["loss"] is not None for r in records), "no update happened: the test shows nothing"
    assert {n for n, p in policy.named_parameters() if p.requires_grad} == trainable
    assert policy.active_adapter == POLICY_ADAPTER
    assert any(not torch.equal(before[n], p) for n, p in policy.named_parameters() if n in trainable)
    assert all(torch.equal(reference[n], p) for n, p in policy.named_parameters() if n in reference)

    scored = score_packed(policy, ids, boundaries, gold)
    assert torch.allclose(scored, warm_scores, atol=1e-5), "π_ref is the warm start, not the trained policy"
    with policy.disable_adapter(), torch.no_grad():
        assert not torch.allclose(score_packed(policy.get_base_model(), ids, boundaries, gold), warm_scores, atol=1e-3)
    save_policy(policy, tmp_path / "saved")
    assert not (tmp_path / "saved" / REFERENCE_ADAPTER).exists(), "the reference is never saved with the adapter"


def test_an_episode_samples_the_same_whatever_else_is_in_the_batch(tmp_path):
    trainer = _trainer(tmp_path, hint_fraction=0.5)
    alone = trainer.rollouts([3])
    together = [e for e in trainer.rollouts([8, 3, 5]) if e.seed == 3]
    assert [e.completion_ids for e in alone] == [e.completion_ids for e in together]
    trainer.step += 1
    assert [e.completion_ids for e in trainer.rollouts([3])] != [e.completion_ids for e in alone], "steps draw afresh"


def test_a_run_with_a_reference_resumes_from_its_checkpoint(tmp_path):
    folder, _ = _warm_start(tmp_path)

    def trainer():
        base, _ = chatty_tiny_model()
        return _trainer(tmp_path / "run", model=add_reference(attach_lora(base, adapter_dir=folder), folder), steps=1)

    first = trainer()
    first.train(progress=False)
    trained = {n: p.detach().clone() for n, p in first.policy.named_parameters() if p.requires_grad}
    resumed = trainer()
    assert resumed.resume() and resumed.step == 1, (
        "the checkpoint holds the policy adapter; the reference comes from its folder"
    )
    assert all(torch.equal(trained[n], p) for n, p in resumed.policy.named_parameters() if n in trained)
