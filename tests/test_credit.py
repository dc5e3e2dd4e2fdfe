"""TRACE turn-credit math (papers/TRACE.md §2) on hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from tracegym.adapters.config import CreditConfig
from tracegym.adapters.credit import (
    episode_advantages,
    k_step_backup,
    one_step_credits,
    outcome_advantages,
    token_advantages,
    turn_rewards,
    turn_values,
)
from tracegym.rollout import Episode


def test_one_step_credits_telescope():
    ell = torch.tensor([-9.0, -7.5, -8.2, -3.0, -0.4], dtype=torch.float64)
    for eps in (0.001, 0.1, 1.0):
        deltas = one_step_credits(ell, eps)
        assert len(deltas) == 4
        assert deltas.sum().item() == pytest.approx(math.log((9.0 + eps) / (0.4 + eps)), abs=1e-12)
        values = turn_values(ell, eps)
        assert values[0].item() == 0.0
        assert torch.allclose(values[1:] - values[:-1], deltas)


def test_paper_worked_example():
    """At eps 0.001 the same raw gain of ~3.55 nats earns 1.1806 near the answer, 0.4052 far from it."""
    near = one_step_credits(torch.tensor([-5.1187, -1.5712]), 0.001).item()
    far = one_step_credits(torch.tensor([-10.6570, -7.1061]), 0.001).item()
    assert near == pytest.approx(1.1806, abs=5e-5)
    assert far == pytest.approx(0.4052, abs=5e-5)


def test_k_step_backup_and_terminal_fill_by_hand():
    # T = 4 actions, deltas chosen directly through ℓ with eps = 1: d = 1 - ℓ
    d = [16.0, 8.0, 8.0, 2.0, 1.0]  # deltas: log 2, 0, log 4, log 2
    ell = torch.tensor([1.0 - x for x in d])
    config = CreditConfig(eps=1.0, K=3, gamma=0.5, lambda_term=2.0)
    deltas = one_step_credits(ell, config.eps)
    l2 = math.log(2)
    assert deltas.tolist() == pytest.approx([l2, 0.0, 2 * l2, l2])
    backup = k_step_backup(deltas, K=3, gamma=0.5)
    expected_c = [
        (l2 + 0.5 * 0 + 0.25 * 2 * l2) / 1.75,  # k=0: u = 0..2
        (0 + 0.5 * 2 * l2 + 0.25 * l2) / 1.75,  # k=1: u = 1..3
        (2 * l2 + 0.5 * l2) / 1.5,  # k=2: h = 3 (clipped)
        l2,  # k=3
    ]
    assert backup.tolist() == pytest.approx(expected_c)
    a_out = -0.8
    rewards = turn_rewards(ell, a_out, config)
    # h_k = T-1 = 3 for k = 1, 2, 3: fill λ γ^{T-k} A_out; k = 0 has h_0 = 2: no fill
    expected_r = [expected_c[0]] + [expected_c[k] + 2.0 * 0.5 ** (4 - k) * a_out for k in (1, 2, 3)]
    assert rewards.tolist() == pytest.approx(expected_r)


def test_single_action_and_no_action():
    config = CreditConfig()
    assert len(turn_rewards(torch.tensor([-2.0]), 1.0, config)) == 0
    (r0,) = turn_rewards(torch.tensor([-2.0, -1.0]), 1.5, config).tolist()
    assert r0 == pytest.approx(math.log(2.1 / 1.1) + 2.0 * 0.8 * 1.5)


def test_outcome_advantages_zscore_and_flat_groups():
    adv = outcome_advantages([1.0, 0.0, 0.5, 0.5, 0.5, 0.2, 0.2, 0.9], ["a", "a", "b", "b", "b", "c", "c", "c"])
    assert adv[:2].tolist() == pytest.approx([1.0, -1.0])
    assert adv[2:5].tolist() == [0.0, 0.0, 0.0]
    c = torch.tensor([0.2, 0.2, 0.9], dtype=torch.float64)
    assert adv[5:].tolist() == pytest.approx(((c - c.mean()) / c.std(unbiased=False)).tolist())


def _episode(seed, reward, turn_ids, boundaries):
    n = len(turn_ids)
    mask = [int(t >= 0) for t in turn_ids]
    return Episode(seed, False, [], [1], [1], list(range(n)), mask, [0.0] * n, turn_ids, boundaries, reward, {})


def test_token_advantages_place_turn_credit_on_actions_and_outcome_on_the_answer():
    # two actions (turn 0, 1) with observations between, then the final answer (turn 2)
    turn_ids = [0, 0, -1, -1, 1, -1, -1, 2, 2, -1]
    episodes = [_episode(7, 1.0, turn_ids, [0, 4, 7]), _episode(7, 0.0, turn_ids[:3], [0])]
    ell = [torch.tensor([-6.0, -3.0, -1.0]), torch.tensor([-6.0])]
    config = CreditConfig()
    adv = episode_advantages(episodes, ell, config)
    assert adv.shape == (2, 10)
    rewards = turn_rewards(ell[0], 1.0, config)
    expected = [1.0 + 0.2 * rewards[0].item()] * 2 + [0, 0] + [1.0 + 0.2 * rewards[1].item()] + [0, 0, 1.0, 1.0, 0]
    assert adv[0].tolist() == pytest.approx(expected)
    # the second episode answered at once (turn 0 is its final answer, T = 0): outcome only, then padding
    assert adv[1].tolist() == pytest.approx([-1.0, -1.0, 0.0] + [0.0] * 7)
    grpo = episode_advantages(episodes, None, CreditConfig(credit="grpo"))
    assert grpo[0].tolist() == pytest.approx([1.0 if t >= 0 else 0.0 for t in turn_ids])


def test_token_advantages_need_one_reward_per_action():
    with pytest.raises(ValueError, match="2 turn rewards"):
        token_advantages([0, 1], [1, 1], 2, 1.0, torch.zeros(1), CreditConfig())
    with pytest.raises(ValueError, match="credit"):
        CreditConfig(credit="ppo")
