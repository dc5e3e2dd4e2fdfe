"""The GRPO policy-gradient pieces on token tensors: batching episodes, per-token log-probs and the
clipped surrogate.

Layout. An episode's sequence is `train_prompt_ids + completion_ids` (the hint-free prompt: the
update never sees the hint). Sequences are LEFT-padded to a common width L, so every completion
ends at the last position and only the last C = (longest completion) positions need logits: the
vocabulary projection, the largest tensor of a small model's step, is computed for C, not L,
positions. Column j of the (B, C) tensors is the log-prob of input token L-C+j given the tokens
before it; completion token i of an episode with completion length c sits in column C-c+i.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from tracegym.rollout import Episode


@dataclass
class TokenBatch:
    """Left-padded episodes: `input_ids`, `attention_mask`, `position_ids` (B, L); `loss_mask` (1 on
    sampled completion tokens) and `advantages` (B, C) on the last C target positions."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor

    def rows(self, index: Sequence[int] | slice) -> "TokenBatch":
        return TokenBatch(*(tensor[index] for tensor in (self.input_ids, self.attention_mask, self.position_ids, self.loss_mask, self.advantages)))

    def to(self, device: torch.device | str) -> "TokenBatch":
        return TokenBatch(*(tensor.to(device) for tensor in (self.input_ids, self.attention_mask, self.position_ids, self.loss_mask, self.advantages)))

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def episode_batch(episodes: Sequence[Episode], advantages: torch.Tensor, pad_id: int) -> TokenBatch:
    """Batch `episodes` (hint-free prompts) with per-completion-token `advantages` of shape (B, T),
    T ≥ the longest completion (entries past an episode's completion are ignored)."""
    width = max(len(e.train_prompt_ids) + len(e.completion_ids) for e in episodes)
    columns = max(len(e.completion_ids) for e in episodes)
    input_ids = torch.full((len(episodes), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(episodes), width), dtype=torch.long)
    loss_mask = torch.zeros((len(episodes), columns), dtype=torch.float32)
    token_advantages = torch.zeros((len(episodes), columns), dtype=torch.float32)
    for row, episode in enumerate(episodes):
        ids, completion = episode.train_prompt_ids + episode.completion_ids, len(episode.completion_ids)
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention_mask[row, width - len(ids) :] = 1
        loss_mask[row, columns - completion :] = torch.tensor(episode.loss_mask, dtype=torch.float32)
        token_advantages[row, columns - completion :] = advantages[row, :completion].float()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return TokenBatch(input_ids, attention_mask, position_ids, loss_mask, token_advantages * loss_mask)


def token_logprobs(model: torch.nn.Module, batch: TokenBatch, temperature: float = 1.0) -> torch.Tensor:
    """(B, C) log-probs under `model` of the last C tokens of each row (C = batch.loss_mask width),
    from logits divided by the sampling `temperature` (as the rollout sampled them).

    Only tokens the policy sampled (loss_mask 1) are scored, 0 elsewhere: logits are projected
    onto the vocabulary at those positions alone, not at the (much longer) observations.
    """
    rows, width = batch.input_ids.shape
    columns = batch.loss_mask.shape[1]
    scored = batch.loss_mask.bool()
    keep = torch.zeros((rows, width), dtype=torch.bool, device=scored.device)
    keep[:, width - columns - 1 : width - 1] = scored  # position t predicts token t + 1
    logits = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
        logits_to_keep=keep, use_cache=False,
    ).logits
    logits = logits.reshape(-1, logits.shape[-1]).float() / temperature
    targets = batch.input_ids[:, -columns:][scored].unsqueeze(-1)
    values = logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    logprobs = torch.zeros((rows, columns), dtype=values.dtype, device=values.device)
    logprobs[scored] = values
    return logprobs


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum over masked tokens of −min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A), ρ = exp(logp − old), and the
    number of masked tokens whose ratio was clipped. Divide the sum by the token count yourself."""
    ratio = torch.exp(logprobs - old_logprobs)
    clipped_ratio = ratio.clamp(1.0 - epsilon_low, 1.0 + epsilon_high)
    objective = torch.minimum(ratio * advantages, clipped_ratio * advantages)
    was_clipped = ((ratio != clipped_ratio) & (mask > 0)).sum()
    return -(objective * mask).sum(), was_clipped
