"""GRPO trainer on the tiny model: gradient sign, the packed step against the unpacked one, zero-variance
groups, hint stripping, artifacts."""

from __future__ import annotations

import json
import logging

import torch
from adapters_lookup_env import FlatEnv, ProseEnv, chatty_tiny_model
from peft import PeftModel

from tracegym import precision
from tracegym.adapters.artifacts import write_artifacts
from tracegym.adapters.config import CreditConfig, TurnGRPOConfig
from tracegym.adapters.grpo import TurnGRPOTrainer, read_log, varied_groups
from tracegym.adapters.lora import attach_lora, trainable_state
from tracegym.adapters.policy_loss import GroupBatch, group_batches, token_logprobs
from tracegym.cli import main
from tracegym.config import RolloutConfig, config_dict
from tracegym.models import tiny_model
from tracegym.rollout import HINT_SEPARATOR, Episode, turn_token_budget
from tracegym.schema import AdapterArtifact, EnvSpec
from tracegym.synth_envs.registry import make_env


def _trainer(tmp_path, env=ProseEnv, max_new_tokens=12, credit="trace", temperature=1.0, **overrides):
    model, tokenizer = chatty_tiny_model()
    settings = dict(steps=1, groups_per_step=1, group_size=4, learning_rate=1e-2, lora_rank=4, save_every=1)
    config = TurnGRPOConfig(**{**settings, **overrides}, credit=CreditConfig(credit=credit))
    rollout = RolloutConfig(temperature=temperature, max_new_tokens=max_new_tokens)
    return TurnGRPOTrainer(attach_lora(model, rank=config.lora_rank), tokenizer, env, config, rollout, tmp_path)


def _sampled_logprob(trainer, episode):
    (group,) = group_batches([episode], torch.zeros(1, len(episode.completion_ids)), trainer.pad_id)
    group = group.to(trainer.accelerator.device)
    with torch.no_grad():
        return float((token_logprobs(trainer.model, group) * group.loss_mask).sum())


def test_positive_advantage_tokens_get_more_likely(tmp_path):
    trainer = _trainer(tmp_path, hint_fraction=0.0)
    episodes = trainer.rollouts([7])[:2]
    width = max(len(e.completion_ids) for e in episodes)
    advantages = torch.zeros(2, width)
    advantages[0], advantages[1] = 1.0, -1.0
    assert all(sum(e.loss_mask) > 0 for e in episodes)
    before = [_sampled_logprob(trainer, e) for e in episodes]
    trainer.update(episodes, advantages)
    after = [_sampled_logprob(trainer, e) for e in episodes]
    assert after[0] > before[0]
    assert after[1] < before[1]


def _unpacked_loss(policy, episodes, advantages, temperature):
    """The GRPO loss of one batch used once (ratio exp(logp - logp.detach())), token mean, each
    episode's whole sequence run on its own."""
    tokens = sum(sum(e.loss_mask) for e in episodes)
    device = next(policy.parameters()).device
    loss = torch.zeros((), device=device)
    for episode, advantage in zip(episodes, advantages.to(device)):
        prompt, completion = episode.train_prompt_ids, torch.tensor(episode.completion_ids, device=device)
        ids = torch.tensor([prompt + episode.completion_ids], device=device)
        logits = policy(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
        logprobs = logits.log_softmax(-1).gather(-1, completion[:, None])[:, 0]
        mask = torch.tensor(episode.loss_mask, dtype=torch.float32, device=device)
        loss = loss - (torch.exp(logprobs - logprobs.detach()) * advantage[: len(completion)] * mask).sum() / tokens
    return loss


def test_packed_step_equals_the_unpacked_step(tmp_path):
    """Two groups with hinted rollouts, each split into micro-batches, temperature 0.7: loss and
    LoRA gradients of `update` equal those of running each episode's whole sequence; no
    old-log-prob pass, and each group's prompt encoded once (one forward per group, one per
    micro-batch)."""
    trainer = _trainer(tmp_path, hint_fraction=0.5, micro_batch_size=3, temperature=0.7, max_grad_norm=1e9)
    generator = _randomise_lora(trainer)
    episodes = trainer.rollouts([3, 4])
    assert len({tuple(e.train_prompt_ids) for e in episodes}) == 2 and sum(e.hinted for e in episodes) == 4
    assert any(e.train_prompt_ids != e.prompt_ids for e in episodes)
    advantages = torch.randn(len(episodes), max(len(e.completion_ids) for e in episodes), generator=generator)
    trainable = {n: p for n, p in trainer.policy.named_parameters() if p.requires_grad}

    trainer.policy.train()
    expected_loss = _unpacked_loss(trainer.policy, episodes, advantages, 0.7)
    expected_loss.backward()
    expected = {n: p.grad.clone() for n, p in trainable.items()}
    trainer.optimizer.zero_grad(set_to_none=True)

    widths = []
    trainer.policy.get_base_model().register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    record, got = _update_gradients(trainer, episodes, advantages)
    assert len(widths) == 2 * (1 + 2)  # each group of 4: its prompt, then micro-batches of 3 + 1
    groups = group_batches(episodes, advantages, trainer.pad_id)
    cut = [
        width for group in groups for _, micro in group.micro_batches(3) for width in [micro.completion_ids.shape[1]]
    ]
    assert widths[1:3] + widths[4:6] == cut  # each micro-batch runs to its own last sampled token
    assert min(cut) < max(group.completion_ids.shape[1] for group in groups)
    assert abs(record["loss"] - expected_loss.item()) < 1e-4
    assert max(g.abs().max().item() for g in expected.values()) > 1e-2
    for name, gradient in expected.items():
        assert torch.allclose(got[name], gradient, atol=1e-4), name


def test_micro_batches_sort_rows_by_length_and_cut_after_the_last_sampled_token():
    mask = torch.tensor(
        [[1, 1, 1, 1, 1, 0], [1, 0, 0, 0, 0, 0], [0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=torch.float32
    )
    ids = torch.arange(24).reshape(4, 6)
    group = GroupBatch(torch.tensor([7, 8]), ids, mask, mask * 0.5)
    batches = group.micro_batches(2)
    assert [index.tolist() for index, _ in batches] == [[3, 1], [2, 0]]
    assert [micro.completion_ids.shape[1] for _, micro in batches] == [1, 5]
    index, micro = batches[1]
    assert torch.equal(micro.completion_ids, ids[[2, 0], :5]) and torch.equal(micro.loss_mask, mask[[2, 0], :5])
    assert sum(micro.loss_mask.sum() for _, micro in batches) == mask.sum()


def _randomise_lora(trainer) -> torch.Generator:
    """Random LoRA weights (LoRA B starts at zero, which would zero every gradient of A); returns
    the generator, seeded 0, for further draws."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in trainer.policy.parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.05)
    return generator


def _update_gradients(trainer, episodes, advantages) -> tuple[dict, dict[str, torch.Tensor]]:
    """`trainer.update`'s record and the LoRA gradients it would step on (the step itself is skipped)."""
    got: dict[str, torch.Tensor] = {}
    trainable = {n: p for n, p in trainer.policy.named_parameters() if p.requires_grad}
    trainer.optimizer.step = lambda *args, **kwargs: got.update({n: p.grad.clone() for n, p in trainable.items()})
    return trainer.update(episodes, advantages), got


def test_bf16_update_follows_the_float32_gradient(tmp_path, monkeypatch):
    """With `bf16` the update's forward passes run in bfloat16 autocast: its gradient differs from
    float32's (the autocast is on) but points the same way, and the weights stay float32."""
    monkeypatch.setattr(precision, "native_bf16", lambda device_type: True)  # as on a CPU with AVX512-BF16
    gradients, episodes = {}, None
    for bf16 in (False, True):
        trainer = _trainer(tmp_path / str(bf16), hint_fraction=0.0, micro_batch_size=2, max_grad_norm=1e9, bf16=bf16)
        generator = _randomise_lora(trainer)
        episodes = episodes or trainer.rollouts([3])  # the float32 trainer's, for both
        advantages = torch.randn(len(episodes), max(len(e.completion_ids) for e in episodes), generator=generator)
        _, gradients[bf16] = _update_gradients(trainer, episodes, advantages)
        assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())
    flat = {bf16: torch.cat([g.flatten() for g in grads.values()]) for bf16, grads in gradients.items()}
    assert not torch.allclose(flat[True], flat[False], atol=1e-6)
    assert torch.nn.functional.cosine_similarity(flat[True], flat[False], dim=0) > 0.99


def test_bf16_falls_back_to_float32_where_the_device_has_no_native_bfloat16(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(precision, "native_bf16", lambda device_type: False)
    precision._warn_emulated.cache_clear()
    with caplog.at_level(logging.WARNING, logger="tracegym.precision"):
        trainer = _trainer(tmp_path, bf16=True)
    assert not trainer.bf16 and "training in float32" in caplog.text
    with trainer._autocast():
        assert not torch.is_autocast_enabled("cpu")


def _episode(seed: int, reward: float) -> Episode:
    return Episode(seed=seed, hinted=False, messages=[], prompt_ids=[1], train_prompt_ids=[1], reward=reward)


def test_varied_groups_drops_zero_variance_groups():
    episodes = [_episode(0, r) for r in (0.5, 0.5, 0.5)] + [_episode(1, r) for r in (0.0, 1.0, 0.0)]
    kept = varied_groups(episodes, group_size=3)
    assert [[e.seed for e in g] for g in kept] == [[1, 1, 1]]


def test_step_without_varied_groups_leaves_the_adapter_untouched(tmp_path):
    flat = _trainer(tmp_path / "flat", env=FlatEnv, max_new_tokens=64)  # no turn cut short (reward 0)
    before = trainable_state(flat.policy)
    record = flat.train_step()
    assert record["kept_groups"] == 0 and record["loss"] is None and record["reward_std"] == 0.0
    assert all(torch.equal(before[k], v) for k, v in trainable_state(flat.policy).items())

    varied = _trainer(tmp_path / "varied", env=ProseEnv)
    before = trainable_state(varied.policy)
    record = varied.train_step()
    assert record["kept_groups"] > 0 and record["loss"] is not None
    assert any(not torch.equal(before[k], v) for k, v in trainable_state(varied.policy).items())


def test_update_sees_the_prompt_without_the_hint(tmp_path):
    trainer = _trainer(tmp_path, hint_fraction=0.5)
    episodes = trainer.rollouts([3])
    hinted = [e for e in episodes if e.hinted]
    assert len(hinted) == 2
    hint_text = trainer.tokenizer.decode(hinted[0].prompt_ids)
    assert HINT_SEPARATOR.strip() in hint_text
    (group,) = group_batches(episodes, torch.zeros(len(episodes), 1), trainer.pad_id)
    assert group.prompt_ids.tolist() == episodes[0].train_prompt_ids
    assert HINT_SEPARATOR.strip() not in trainer.tokenizer.decode(group.prompt_ids)
    for row, episode in enumerate(episodes):
        assert episode.train_prompt_ids == group.prompt_ids.tolist()
        assert group.completion_ids[row, : len(episode.completion_ids)].tolist() == episode.completion_ids
    # Unhinted episodes were sampled from exactly this context at temperature 1.0: the recomputed
    # (prompt-shared) log-probs are the sampling log-probs.
    with torch.no_grad():
        recomputed = token_logprobs(trainer.model, group.to(trainer.accelerator.device)).cpu()
    for row, episode in enumerate(episodes):
        if episode.hinted:
            continue
        mask = group.loss_mask[row] == 1
        sampled = torch.tensor([lp for lp, m in zip(episode.logprobs, episode.loss_mask) if m])
        assert torch.allclose(recomputed[row][mask], sampled, atol=1e-4)


def test_training_writes_a_loadable_peft_adapter(tmp_path):
    credit = "grpo"
    trainer = _trainer(tmp_path, credit=credit, steps=2)
    trainer.train(progress=False)
    records = read_log(tmp_path)
    assert [r["step"] for r in records] == [1, 2]
    spec = EnvSpec(capability="tool_calling_precision", family="prose_test")
    write_artifacts(tmp_path, trainer.policy, config_dict(trainer.config), records, spec, "tiny", credit, {})
    artifact = AdapterArtifact.model_validate_json((tmp_path / "artifact.json").read_text())
    assert artifact.credit == credit and (tmp_path / "learning_curve.png").stat().st_size > 0
    ids = torch.tensor([trainer.tokenizer("hello there")["input_ids"]])
    trainer.policy.cpu()  # trained on the accelerator's device; compared here on the CPU
    base, _ = chatty_tiny_model()
    loaded = PeftModel.from_pretrained(base, str(tmp_path)).eval()
    with torch.no_grad():
        expected = trainer.policy.eval()(input_ids=ids).logits
        assert torch.allclose(loaded(input_ids=ids).logits, expected, atol=1e-6)
        with loaded.disable_adapter():
            assert not torch.allclose(loaded(input_ids=ids).logits, expected, atol=1e-6)


def test_train_cli_rejects_bad_specs(tmp_path, capsys):
    assert main(["train", "no_such_family", "--out", str(tmp_path / "a")]) == 1
    assert "unknown environment family" in capsys.readouterr().err
    bad = tmp_path / "spec.json"
    bad.write_text('{"family": 3}')
    assert main(["train", str(bad), "--out", str(tmp_path / "b")]) == 1
    assert "not an EnvSpec" in capsys.readouterr().err


def test_train_cli_writes_artifacts_and_resumes(tmp_path, capsys):
    out = tmp_path / "adapter"
    common = [
        "train",
        "precondition_verification",
        "--out",
        str(out),
        "--model",
        "tiny",
        "--grpo-groups-per-step",
        "1",
        "--grpo-group-size",
        "2",
        "--max-new-tokens",
        "6",
        "--eval-seeds",
        "0",
        "--grpo-save-every",
        "1",
        "--credit",
        "grpo",
    ]
    assert main([*common, "--grpo-steps", "1"]) == 0
    assert main([*common, "--grpo-steps", "2"]) == 1  # a checkpoint exists: no silent overwrite
    assert "--resume" in capsys.readouterr().err
    assert main([*common, "--grpo-steps", "2", "--resume"]) == 0
    assert [r["step"] for r in read_log(out)] == [1, 2]
    artifact = AdapterArtifact.model_validate_json((out / "artifact.json").read_text())
    assert artifact.metrics["steps"] == 2 and artifact.env_spec.family == "precondition_verification"
    for name in ("adapter_config.json", "adapter_model.safetensors", "train_config.json", "learning_curve.png"):
        assert (out / name).is_file(), name
    assert artifact.metrics["turn_budget_tokens"] == 6


def test_the_fitted_turn_budget_is_recorded_with_the_config(tmp_path):
    out = tmp_path / "adapter"
    assert (
        main(
            [
                "train",
                "precondition_verification",
                "--out",
                str(out),
                "--model",
                "tiny",
                "--grpo-steps",
                "1",
                "--grpo-groups-per-step",
                "1",
                "--grpo-group-size",
                "2",
                "--eval-seeds",
                "0",
                "--credit",
                "grpo",
            ]
        )
        == 0
    )
    fitted = turn_token_budget(make_env("precondition_verification"), tiny_model()[1])
    recorded = json.loads((out / "train_config.json").read_text())
    assert recorded["rollout"]["max_new_tokens"] == fitted
    assert (
        AdapterArtifact.model_validate_json((out / "artifact.json").read_text()).metrics["turn_budget_tokens"] == fitted
    )


def test_eval_cli_scores_policies_on_the_same_seeds_and_pairs_them(tmp_path, capsys):
    out = tmp_path / "adapter"
    assert (
        main(
            [
                "train",
                "precondition_verification",
                "--out",
                str(out),
                "--model",
                "tiny",
                "--grpo-steps",
                "1",
                "--grpo-groups-per-step",
                "1",
                "--grpo-group-size",
                "2",
                "--max-new-tokens",
                "6",
                "--eval-seeds",
                "0",
            ]
        )
        == 0
    )
    evaluation = ["--model", "tiny", "--eval-seeds", "3", "--eval-sampled", "2", "--max-new-tokens", "6"]
    assert main(["eval", "base", str(out), str(out), "--out", str(tmp_path / "eval"), *evaluation]) == 0
    assert "change vs first" in capsys.readouterr().out
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert result["env_spec"]["family"] == "precondition_verification", "the environment comes from the adapter"
    policies = result["policies"]
    assert [p["name"] for p in policies] == ["base (tiny)", str(out), str(out)]
    assert all(len(p["greedy_reward"]) == 3 and len(p["sampled_reward"]) == 3 for p in policies)
    assert policies[0]["versus_first"] is None and set(policies[1]["versus_first"]) == {
        "greedy_reward",
        "greedy_success",
        "sampled_reward",
        "sampled_success",
    }
    same = [policies[2][key] for key in ("greedy_reward", "sampled_reward")]
    assert same == [policies[1][key] for key in ("greedy_reward", "sampled_reward")], (
        "the same policy scored twice on the same seeds gets the same rewards, greedy and sampled"
    )
    assert main(["eval", str(tmp_path), "--model", "tiny"]) == 1
    assert "not 'base', a PEFT adapter folder" in capsys.readouterr().err


def test_eval_fits_the_turn_budget_once_for_all_policies(tmp_path, monkeypatch):
    import tracegym.rollout as rollout_module

    fits = []
    fit = rollout_module.turn_token_budget
    monkeypatch.setattr(rollout_module, "turn_token_budget", lambda *a, **k: fits.append(1) or fit(*a, **k))
    assert (
        main(
            [
                "eval",
                "base",
                "base",
                "--family",
                "precondition_verification",
                "--model",
                "tiny",
                "--eval-seeds",
                "2",
                "--eval-sampled",
                "1",
                "--out",
                str(tmp_path / "eval"),
            ]
        )
        == 0
    )
    assert len(fits) == 1, "one fit serves the greedy and sampled episodes of every policy"


def test_eval_without_greedy_scores_sampled_episodes_only(tmp_path, capsys):
    assert (
        main(
            [
                "eval",
                "base",
                "base",
                "--family",
                "precondition_verification",
                "--model",
                "tiny",
                "--no-eval-greedy",
                "--eval-seeds",
                "2",
                "--eval-sampled",
                "1",
                "--out",
                str(tmp_path / "eval"),
            ]
        )
        == 0
    )
    policies = json.loads((tmp_path / "eval" / "eval.json").read_text())["policies"]
    assert all(p["greedy_reward"] == [] and len(p["sampled_reward"]) == 2 for p in policies)
    assert set(policies[1]["versus_first"]) == {"sampled_reward", "sampled_success"}
    assert (
        main(
            [
                "eval",
                "base",
                "--family",
                "precondition_verification",
                "--model",
                "tiny",
                "--no-eval-greedy",
                "--eval-sampled",
                "0",
            ]
        )
        == 1
    )
    assert "greedy is off and sampled is 0" in capsys.readouterr().err


def test_held_out_scoring_of_an_empty_seed_range_gives_empty_scores():
    """`eval.seeds` > 0 with an empty eval range in the spec: empty scores, as before the seeds were
    split among processes, not an IndexError."""
    from tracegym.adapters.heldout import HeldoutScores, compare
    from tracegym.adapters.train import score_sharded

    asked = []

    def score(policy, seeds):
        asked.append(list(seeds))
        return HeldoutScores(list(seeds), [], [], [], [], 2)

    scores = score_sharded(score, None, range(5, 5))
    assert asked == [[]] and scores.seeds == [] and scores.sampled_rollouts == 2
    assert scores.summary() == {} and compare(scores, scores) == {}
    assert score_sharded(score, None, range(2)).seeds == [0, 1]
