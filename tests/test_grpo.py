"""GRPO trainer on the tiny model: gradient sign, zero-variance groups, hint stripping, artifacts."""

from __future__ import annotations

import json

import torch
from adapters_lookup_env import FlatEnv, ProseEnv, chatty_tiny_model
from peft import PeftModel

from tracegym.adapters.artifacts import write_artifacts
from tracegym.adapters.config import CreditConfig, GRPOConfig
from tracegym.adapters.grpo import GRPOTrainer, read_log, varied_groups
from tracegym.adapters.lora import attach_lora, trainable_state
from tracegym.adapters.policy_loss import episode_batch, token_logprobs
from tracegym.cli import main
from tracegym.config import RolloutConfig, config_dict
from tracegym.models import tiny_model
from tracegym.rollout import HINT_SEPARATOR, Episode, turn_token_budget
from tracegym.schema import AdapterArtifact, EnvSpec
from tracegym.synth_envs.registry import make_env


def _trainer(tmp_path, env=ProseEnv, max_new_tokens=12, credit="trace", **overrides):
    model, tokenizer = chatty_tiny_model()
    settings = dict(steps=1, groups_per_step=1, group_size=4, learning_rate=1e-2, lora_rank=4, save_every=1)
    config = GRPOConfig(**{**settings, **overrides}, credit=CreditConfig(credit=credit))
    rollout = RolloutConfig(max_new_tokens=max_new_tokens)
    return GRPOTrainer(attach_lora(model, rank=config.lora_rank), tokenizer, env, config, rollout, tmp_path)


def _sampled_logprob(trainer, batch, row):
    with torch.no_grad():
        logp = token_logprobs(trainer.model, batch.rows(slice(row, row + 1)))
    return float((logp * batch.loss_mask[row : row + 1]).sum())


def test_positive_advantage_tokens_get_more_likely(tmp_path):
    trainer = _trainer(tmp_path, hint_fraction=0.0)
    episodes = trainer.rollouts([7])[:2]
    width = max(len(e.completion_ids) for e in episodes)
    advantages = torch.zeros(2, width)
    advantages[0], advantages[1] = 1.0, -1.0
    batch = episode_batch(episodes, advantages, trainer.pad_id)
    assert batch.loss_mask.sum() > 0
    before = [_sampled_logprob(trainer, batch, row) for row in range(2)]
    trainer.update(batch)
    after = [_sampled_logprob(trainer, batch, row) for row in range(2)]
    assert after[0] > before[0]
    assert after[1] < before[1]


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
    batch = episode_batch(episodes, torch.zeros(len(episodes), 1), trainer.pad_id)
    for row, episode in enumerate(episodes):
        ids = batch.input_ids[row][batch.attention_mask[row] == 1].tolist()
        assert ids == episode.train_prompt_ids + episode.completion_ids
        assert HINT_SEPARATOR.strip() not in trainer.tokenizer.decode(ids)
    # Unhinted episodes were sampled from exactly this context at temperature 1.0: the recomputed
    # (left-padded, batched) log-probs are the sampling log-probs.
    with torch.no_grad():
        recomputed = token_logprobs(trainer.model, batch)
    for row, episode in enumerate(episodes):
        if episode.hinted:
            continue
        mask = batch.loss_mask[row] == 1
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
    common = ["train", "precondition_verification", "--out", str(out), "--model", "tiny", "--grpo-groups-per-step", "1",
              "--grpo-group-size", "2", "--max-new-tokens", "6", "--eval-seeds", "0", "--grpo-save-every", "1", "--credit", "grpo"]
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
    assert main(["train", "precondition_verification", "--out", str(out), "--model", "tiny", "--grpo-steps", "1",
                 "--grpo-groups-per-step", "1", "--grpo-group-size", "2", "--eval-seeds", "0", "--credit", "grpo"]) == 0
    fitted = turn_token_budget(make_env("precondition_verification"), tiny_model()[1])
    recorded = json.loads((out / "train_config.json").read_text())
    assert recorded["rollout"]["max_new_tokens"] == fitted
    assert AdapterArtifact.model_validate_json((out / "artifact.json").read_text()).metrics["turn_budget_tokens"] == fitted


def test_eval_cli_scores_policies_on_the_same_seeds_and_pairs_them(tmp_path, capsys):
    out = tmp_path / "adapter"
    assert main(["train", "precondition_verification", "--out", str(out), "--model", "tiny", "--grpo-steps", "1",
                 "--grpo-groups-per-step", "1", "--grpo-group-size", "2", "--max-new-tokens", "6", "--eval-seeds", "0"]) == 0
    evaluation = ["--model", "tiny", "--eval-seeds", "3", "--eval-sampled", "2", "--max-new-tokens", "6"]
    assert main(["eval", "base", str(out), str(out), "--out", str(tmp_path / "eval"), *evaluation]) == 0
    assert "change vs first" in capsys.readouterr().out
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert result["env_spec"]["family"] == "precondition_verification", "the environment comes from the adapter"
    policies = result["policies"]
    assert [p["name"] for p in policies] == ["base (tiny)", str(out), str(out)]
    assert all(len(p["greedy_reward"]) == 3 and len(p["sampled_reward"]) == 3 for p in policies)
    assert policies[0]["versus_first"] is None and set(policies[1]["versus_first"]) == {
        "greedy_reward", "greedy_success", "sampled_reward", "sampled_success"}
    same = [policies[2][key] for key in ("greedy_reward", "sampled_reward")]
    assert same == [policies[1][key] for key in ("greedy_reward", "sampled_reward")], \
        "the same policy scored twice on the same seeds gets the same rewards, greedy and sampled"
    assert main(["eval", str(tmp_path), "--model", "tiny"]) == 1
    assert "not 'base', a PEFT adapter folder" in capsys.readouterr().err
