"""The GRPO policy-gradient pieces on token tensors: batching episodes, per-token log-probs and the
clipped surrogate.

Layout. An episode's sequence is `train_prompt_ids + completion_ids` (the hint-free prompt: the
update never sees the hint). Position j of the (B, L-1) "target" tensors holds the log-prob of
token j+1 given tokens 0..j, so completion token i of an episode with prompt length P sits at
target position P-1+i. Advantages, sampling masks and old log-probs are placed on that grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from tracegym.rollout import Episode


@dataclass
class TokenBatch:
    """Right-padded episodes: `input_ids`/`attention_mask` (B, L); `loss_mask`/`advantages` (B, L-1)
    on the target grid (loss_mask 1 on sampled completion tokens)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor

    def rows(self, index: Sequence[int] | slice) -> "TokenBatch":
        return TokenBatch(self.input_ids[index], self.attention_mask[index], self.loss_mask[index], self.advantages[index])

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def episode_batch(episodes: Sequence[Episode], advantages: torch.Tensor, pad_id: int) -> TokenBatch:
    """Batch `episodes` (hint-free prompts) with per-completion-token `advantages` of shape (B, T),
    T ≥ the longest completion (entries past an episode's completion are ignored)."""
    lengths = [len(e.train_prompt_ids) + len(e.completion_ids) for e in episodes]
    width = max(lengths)
    input_ids = torch.full((len(episodes), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(episodes), width), dtype=torch.long)
    loss_mask = torch.zeros((len(episodes), width - 1), dtype=torch.float32)
    token_advantages = torch.zeros((len(episodes), width - 1), dtype=torch.float32)
    for row, episode in enumerate(episodes):
        prompt, completion = len(episode.train_prompt_ids), len(episode.completion_ids)
        input_ids[row, : lengths[row]] = torch.tensor(episode.train_prompt_ids + episode.completion_ids)
        attention_mask[row, : lengths[row]] = 1
        loss_mask[row, prompt - 1 : prompt - 1 + completion] = torch.tensor(episode.loss_mask, dtype=torch.float32)
        token_advantages[row, prompt - 1 : prompt - 1 + completion] = advantages[row, :completion].float()
    return TokenBatch(input_ids, attention_mask, loss_mask, token_advantages * loss_mask)


def token_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, L-1) log p(input_ids[:, j+1] | input_ids[:, :j+1]) under `model` (float32)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    targets = input_ids[:, 1:].unsqueeze(-1)
    return logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)


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
