"""The GRPO policy-gradient pieces on token tensors: episodes batched by their shared prompt,
per-token log-probs and the clipped surrogate.

Layout. Every rollout of a GRPO group is trained on the same hint-free prompt (`train_prompt_ids`;
a hinted rollout's hint never reaches the update), so a `GroupBatch` holds that prompt once and the
group's completions right-padded to (n, C). `token_logprobs` encodes the prompt minus its last token
once (P - 1 tokens, with gradients) and runs all n continuations [last prompt token, completion
tokens but the last] against its keys and values (the prompt's cache expanded to n rows, positions
P - 1 onwards): column j of the (n, C) result is the log-prob of completion token j. Every
continuation attends to the prompt and to itself only, so the log-probs and their gradients equal
those of running each episode's whole sequence (tests/test_grpo.py checks within 1e-4), while the
prompt is encoded once per group instead of once per rollout. Only the positions of sampled tokens
(loss_mask 1) are projected onto the vocabulary. A group trained in several micro-batches passes
the prompt's encoding (`encode_prompt`) to each: the trainer backpropagates it once for the group
(tracegym.adapters.grpo). Why a shared prefix cache rather than one packed row with a block
mask: docs/engineering.md, "adapters".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from tracegym.rollout import Episode


@dataclass
class GroupBatch:
    """Episodes sharing one training prompt: `prompt_ids` (P,), `completion_ids`, `loss_mask` (1 on
    sampled tokens) and `advantages` (n, C), right-padded (padding has loss_mask 0)."""

    prompt_ids: torch.Tensor
    completion_ids: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor

    def rows(self, index: Sequence[int] | slice | torch.Tensor) -> GroupBatch:
        return GroupBatch(self.prompt_ids, self.completion_ids[index], self.loss_mask[index], self.advantages[index])

    def micro_batches(self, size: int) -> list[tuple[torch.Tensor, GroupBatch]]:
        """The rows, `size` at a time in order of their last scored column, each micro-batch cut after
        its own last scored column: (row indices, micro-batch). The cut columns change no scored
        log-prob (attention is causal), so the loss and its gradients are those of the whole rows,
        without the forward pass over a long row's padding in every micro-batch."""
        columns = torch.arange(1, self.loss_mask.shape[1] + 1, device=self.loss_mask.device)
        widths = ((self.loss_mask > 0) * columns).amax(dim=1)
        order = torch.argsort(widths, stable=True)
        batches = []
        for start in range(0, len(order), size):
            index = order[start : start + size]
            width = max(int(widths[index].max()), 1)
            batches.append(
                (
                    index,
                    GroupBatch(
                        self.prompt_ids,
                        self.completion_ids[index, :width],
                        self.loss_mask[index, :width],
                        self.advantages[index, :width],
                    ),
                )
            )
        return batches

    def to(self, device: torch.device | str) -> GroupBatch:
        return GroupBatch(
            *(tensor.to(device) for tensor in (self.prompt_ids, self.completion_ids, self.loss_mask, self.advantages))
        )

    def __len__(self) -> int:
        return self.completion_ids.shape[0]


def group_batches(episodes: Sequence[Episode], advantages: torch.Tensor, pad_id: int) -> list[GroupBatch]:
    """Batch `episodes` by identical `train_prompt_ids` (in order of first appearance), with
    per-completion-token `advantages` of shape (len(episodes), T), T >= the longest completion
    (entries past an episode's completion are ignored; advantages are zeroed off the loss mask)."""
    if len(advantages) != len(episodes):
        raise ValueError(f"{len(advantages)} rows of advantages for {len(episodes)} episodes")
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, episode in enumerate(episodes):
        if len(episode.train_prompt_ids) < 2 or not episode.completion_ids:
            raise ValueError(
                f"episode of seed {episode.seed}: a training sequence needs a prompt of >= 2 tokens and a completion"
            )
        groups.setdefault(tuple(episode.train_prompt_ids), []).append(row)
    batches = []
    for prompt, rows in groups.items():
        columns = max(len(episodes[row].completion_ids) for row in rows)
        completion_ids = torch.full((len(rows), columns), pad_id, dtype=torch.long)
        loss_mask = torch.zeros((len(rows), columns), dtype=torch.float32)
        token_advantages = torch.zeros((len(rows), columns), dtype=torch.float32)
        for i, row in enumerate(rows):
            episode, length = episodes[row], len(episodes[row].completion_ids)
            completion_ids[i, :length] = torch.tensor(episode.completion_ids)
            loss_mask[i, :length] = torch.tensor(episode.loss_mask, dtype=torch.float32)
            token_advantages[i, :length] = advantages[row, :length].float()
        batches.append(GroupBatch(torch.tensor(prompt), completion_ids, loss_mask, token_advantages * loss_mask))
    return batches


PromptEncoding = list[tuple[torch.Tensor, torch.Tensor]]


def encode_prompt(model: torch.nn.Module, prompt_ids: torch.Tensor) -> PromptEncoding:
    """Keys and values per layer, each (1, kv heads, P - 1, head dim), of a prompt minus its last
    token: what every continuation of the group attends to. Differentiable."""
    layers = model(input_ids=prompt_ids[:-1][None], use_cache=True, logits_to_keep=1).cache.layers
    return [(layer.keys, layer.values) for layer in layers]


def token_logprobs(
    model: torch.nn.Module, batch: GroupBatch, temperature: float = 1.0, prompt: PromptEncoding | None = None
) -> torch.Tensor:
    """(n, C) log-probs under `model` of the completion tokens (0 where loss_mask is 0), from logits
    divided by the sampling `temperature` (as the rollout sampled them); `prompt`: the batch
    prompt's `encode_prompt` (default: encoded here). Differentiable."""
    rows, columns = batch.completion_ids.shape
    prompt = encode_prompt(model, batch.prompt_ids) if prompt is None else prompt
    cache = DynamicCache([(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1)) for keys, values in prompt])
    inputs = torch.cat([batch.prompt_ids[-1:].expand(rows, 1), batch.completion_ids[:, :-1]], dim=1)
    start = len(batch.prompt_ids) - 1
    positions = torch.arange(start, start + columns, device=inputs.device)[None].expand(rows, -1)
    scored = batch.loss_mask.bool()
    # no padding mask: the right padding comes after every scored position, which causality keeps it from
    logits = (
        model(
            input_ids=inputs, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=scored
        ).logits.float()
        / temperature
    )
    values = logits.gather(-1, batch.completion_ids[scored][:, None])[:, 0] - torch.logsumexp(logits, dim=-1)
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
    number of masked tokens where the clip binds: the ratio is outside the range on the side where
    the clipped term is the one the min selects (ρ > 1+ε_high with A > 0, ρ < 1−ε_low with A < 0),
    so the token gets no gradient. Divide the sum by the token count yourself."""
    ratio = torch.exp(logprobs - old_logprobs)
    clipped_ratio = ratio.clamp(1.0 - epsilon_low, 1.0 + epsilon_high)
    objective = torch.minimum(ratio * advantages, clipped_ratio * advantages)
    binds = ((ratio > 1.0 + epsilon_high) & (advantages > 0)) | ((ratio < 1.0 - epsilon_low) & (advantages < 0))
    return -(objective * mask).sum(), (binds & (mask > 0)).sum()
