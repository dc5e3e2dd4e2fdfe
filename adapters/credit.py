"""TRACE turn credit (docs/method.md, "Turn credit") and GRPO outcome advantages, as pure tensor math.

Index conventions. A rollout has T tool-call actions and states S_0..S_T (S_k = the prompt and the
first k action/observation pairs); action k (0 <= k < T) leads from S_k to S_{k+1}; the final
answer, when there is one, follows S_T and is turn T. ℓ_k is the reference model's mean
log-probability of the gold answer teacher-forced after S_k (adapters/reference_scoring.py).

    d_k  = -ℓ_k + eps                                  remaining gap (> 0)
    V_k  = log(d_0 / d_k)                              value, V_0 = 0
    δ_k  = V_{k+1} - V_k = log(d_k / d_{k+1})          one-step credit of action k (telescopes)
    h_k  = min(k + K - 1, T - 1)
    c_k  = (1 / Z_k) Σ_{u=k}^{h_k} γ^{u-k} δ_u,  Z_k = Σ_{u=k}^{h_k} γ^{u-k}
    r_k  = c_k + 1[h_k = T - 1] · λ_term · γ^{T-k} · A_out
    A_t  = α_out · A_out + α_turn · r_k   on the tokens of action k
    A_t  = α_out · A_out                  on the tokens of the final answer
    A_t  = 0                              where the loss mask is 0 (observations, template)

A_out is the GRPO z-score of the outcome reward in its group (population std; 0 for a group whose
rewards are all equal). Turn values are not group-normalised. `credit="grpo"` switches turn credit
off: every policy token gets A_out.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from tracegym.adapters.config import CreditConfig
from tracegym.rollout import Episode


def outcome_advantages(rewards: Sequence[float], groups: Sequence[Hashable]) -> torch.Tensor:
    """GRPO advantages: each reward's z-score within its group (population std), 0 for a flat group."""
    rewards_t = torch.as_tensor(rewards, dtype=torch.float64)
    advantages = torch.zeros_like(rewards_t)
    members: dict[Hashable, list[int]] = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)
    for indices in members.values():
        values = rewards_t[indices]
        std = values.std(unbiased=False)
        if std > 1e-12:
            advantages[indices] = (values - values.mean()) / std
    return advantages


def _gaps(ell: torch.Tensor, eps: float) -> torch.Tensor:
    return -ell.double() + eps


def turn_values(ell: torch.Tensor, eps: float) -> torch.Tensor:
    """V(S_k) = log(d_0 / d_k) for k = 0..T, from ℓ_0..ℓ_T."""
    gaps = _gaps(ell, eps)
    return torch.log(gaps[0] / gaps)


def one_step_credits(ell: torch.Tensor, eps: float) -> torch.Tensor:
    """δ_k = log(d_k / d_{k+1}) for k = 0..T-1 (length T)."""
    gaps = _gaps(ell, eps)
    return torch.log(gaps[:-1] / gaps[1:])


def k_step_backup(deltas: torch.Tensor, K: int, gamma: float) -> torch.Tensor:
    """c_k: the γ-weighted mean of δ_k..δ_{h_k}, h_k = min(k + K - 1, T - 1)."""
    T = len(deltas)
    backup = torch.zeros(T, dtype=torch.float64)
    for k in range(T):
        weights = gamma ** torch.arange(min(K, T - k), dtype=torch.float64)
        backup[k] = (weights * deltas[k : k + len(weights)].double()).sum() / weights.sum()
    return backup


def turn_rewards(ell: torch.Tensor, a_out: float, config: CreditConfig) -> torch.Tensor:
    """r_k for the T actions of one rollout, from ℓ_0..ℓ_T and its outcome advantage."""
    deltas = one_step_credits(ell, config.eps)
    T = len(deltas)
    rewards = k_step_backup(deltas, config.K, config.gamma)
    for k in range(T):
        if min(k + config.K - 1, T - 1) == T - 1:
            rewards[k] += config.lambda_term * config.gamma ** (T - k) * a_out
    return rewards


def token_advantages(
    turn_ids: Sequence[int],
    loss_mask: Sequence[int],
    num_actions: int,
    a_out: float,
    rewards: torch.Tensor | None,
    config: CreditConfig,
) -> torch.Tensor:
    """Per-token advantages of one rollout (length of its completion).

    `rewards` holds r_0..r_{T-1} (T = `num_actions`); it may be None with credit="grpo".
    """
    turns = torch.as_tensor(turn_ids, dtype=torch.long)
    mask = torch.as_tensor(loss_mask, dtype=torch.float64)
    if config.credit == "grpo":
        return a_out * mask
    if rewards is None or len(rewards) != num_actions:
        raise ValueError(
            f"turn credit needs {num_actions} turn rewards, got {None if rewards is None else len(rewards)}"
        )
    per_turn = torch.cat([config.alpha_turn * rewards.double(), torch.zeros(1, dtype=torch.float64)])
    action_part = torch.where((turns >= 0) & (turns < num_actions), per_turn[turns.clamp(0, num_actions)], 0.0)
    return (config.alpha_out * a_out + action_part) * mask


def episode_advantages(
    episodes: Sequence[Episode],
    ell: Sequence[torch.Tensor] | None,
    config: CreditConfig,
    groups: Sequence[Hashable] | None = None,
) -> torch.Tensor:
    """(B, L) float32 advantages aligned with each episode's completion_ids, right-padded with 0.

    `ell[i]` holds ℓ_0..ℓ_T of episode i (len(boundaries) values; unused and may be None with
    credit="grpo"). Groups default to the episodes' seeds.
    """
    a_out = outcome_advantages(
        [e.reward for e in episodes], groups if groups is not None else [e.seed for e in episodes]
    )
    width = max((len(e.completion_ids) for e in episodes), default=0)
    out = torch.zeros(len(episodes), width, dtype=torch.float32)
    for i, episode in enumerate(episodes):
        rewards = None
        if config.credit == "trace":
            if ell is None or len(ell[i]) != len(episode.boundaries):
                raise ValueError(f"episode {i}: need one ℓ per boundary ({len(episode.boundaries)})")
            rewards = turn_rewards(ell[i], float(a_out[i]), config)
        values = token_advantages(
            episode.turn_ids, episode.loss_mask, episode.num_actions, float(a_out[i]), rewards, config
        )
        out[i, : len(values)] = values.float()
    return out
