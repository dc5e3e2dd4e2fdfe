"""ℓ_k = mean log π_ref(y* | S_k): the reference model's score of the gold answer after every
boundary prefix S_k of a trajectory (papers/TRACE.md §2).

`score_packed` does all prefixes of one trajectory in ONE forward pass. The packed sequence is the
trajectory (up to its last boundary) followed by one copy of the gold answer per boundary; copy j
holds y*_0..y*_{G-2} (the last gold token is only ever predicted). A 4-D additive float mask
(0 = attend, dtype-min = blocked) keeps the trajectory causal and lets copy j see the trajectory
tokens before its boundary b_j plus its own earlier tokens; explicit position_ids place copy j at
b_j, b_j+1, ...; y*_0 is scored from position b_j - 1 of the trajectory, y*_t (t >= 1) from copy
row t - 1. Only those rows are projected to the vocabulary (`logits_to_keep` with indices).

transformers 5.x (checked in masking_utils._preprocess_mask_arguments): a 4-D attention_mask is
returned as-is by create_causal_mask and added to the attention scores by the eager path and by
SDPA (as `attn_mask`), so the same mask works with attn_implementation "eager" and "sdpa".

`score_prefixes` is the straightforward version (one forward per prefix), for tests and the
benchmark. The reference π_ref is the policy training started from: a PeftModel that holds the
frozen REFERENCE_ADAPTER (the warm start, tracegym.adapters.lora.add_reference) is scored with
that adapter active, any other PeftModel with its adapters disabled (the base model).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import ContextManager, Iterator, Mapping, Sequence

import torch
from peft import PeftModel
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tracegym.adapters.lora import REFERENCE_ADAPTER
from tracegym.rollout import Episode


@contextmanager
def _active_adapter(model: PeftModel, name: str) -> Iterator[None]:
    """Adapter `name` active inside the block; the previous one active again after it, and every
    parameter's requires_grad as before (PEFT's set_adapter makes the adapter it activates trainable
    and the others frozen)."""
    previous, flags = model.active_adapter, [(p, p.requires_grad) for p in model.parameters()]
    model.set_adapter(name)
    try:
        yield
    finally:
        model.set_adapter(previous)
        for parameter, flag in flags:
            parameter.requires_grad_(flag)


def reference_mode(model: torch.nn.Module) -> ContextManager:
    """Context in which `model` is the reference (see the module docstring)."""
    if not isinstance(model, PeftModel):
        return nullcontext()
    return _active_adapter(model, REFERENCE_ADAPTER) if REFERENCE_ADAPTER in model.peft_config else model.disable_adapter()


def _check(ids: Sequence[int], boundaries: Sequence[int], gold: Sequence[int]) -> None:
    if not gold:
        raise ValueError("the gold answer has no tokens")
    if not boundaries or min(boundaries) < 1 or max(boundaries) > len(ids):
        raise ValueError(f"boundaries must lie in [1, {len(ids)}], got {list(boundaries)}")


def _mean_gold_logprob(logits: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Mean log-prob of `gold` (G,) under `logits` (..., G, V) -> (...)."""
    logprobs = logits.float().log_softmax(-1)
    return logprobs.gather(-1, gold.expand(*logits.shape[:-1]).unsqueeze(-1)).squeeze(-1).mean(-1)


@torch.no_grad()
def score_prefixes(model: PreTrainedModel, ids: Sequence[int], boundaries: Sequence[int], gold: Sequence[int]) -> torch.Tensor:
    """ℓ for each prefix ids[:b], b in `boundaries` (absolute positions), one forward pass each."""
    _check(ids, boundaries, gold)
    device = next(model.parameters()).device
    gold_t = torch.tensor(gold, dtype=torch.long, device=device)
    scores = []
    with reference_mode(model):
        for b in boundaries:
            sequence = torch.tensor([list(ids[:b]) + list(gold[:-1])], dtype=torch.long, device=device)
            rows = torch.arange(b - 1, b - 1 + len(gold), device=device)
            logits = model(input_ids=sequence, logits_to_keep=rows, use_cache=False).logits[0]
            scores.append(_mean_gold_logprob(logits, gold_t))
    return torch.stack(scores).cpu()


def packed_inputs(
    ids: Sequence[int], boundaries: Sequence[int], gold: Sequence[int], dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids (1, L), 4-D additive mask (1, 1, L, L), position_ids (1, L), scored rows (M, G))."""
    _check(ids, boundaries, gold)
    prefix_len, copy_len, copies = max(boundaries), len(gold) - 1, len(boundaries)
    total = prefix_len + copies * copy_len
    input_ids = torch.tensor(list(ids[:prefix_len]) + list(gold[:-1]) * copies, dtype=torch.long)
    allowed = torch.zeros(total, total, dtype=torch.bool)
    allowed[:prefix_len, :prefix_len] = torch.ones(prefix_len, prefix_len, dtype=torch.bool).tril()
    positions = torch.arange(total)
    rows = torch.empty(copies, len(gold), dtype=torch.long)
    own = torch.ones(copy_len, copy_len, dtype=torch.bool).tril()
    for j, b in enumerate(boundaries):
        start = prefix_len + j * copy_len
        allowed[start : start + copy_len, :b] = True
        allowed[start : start + copy_len, start : start + copy_len] = own
        positions[start : start + copy_len] = torch.arange(b, b + copy_len)
        rows[j, 0] = b - 1
        rows[j, 1:] = torch.arange(start, start + copy_len)
    mask = torch.zeros(total, total, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return input_ids[None], mask[None, None], positions[None], rows


@torch.no_grad()
def score_packed(model: PreTrainedModel, ids: Sequence[int], boundaries: Sequence[int], gold: Sequence[int]) -> torch.Tensor:
    """ℓ for each prefix ids[:b], b in `boundaries` (absolute positions), in one packed forward pass."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    input_ids, mask, positions, rows = packed_inputs(ids, boundaries, gold, dtype)
    with reference_mode(model):
        logits = model(
            input_ids=input_ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            logits_to_keep=rows.flatten().to(device),
            use_cache=False,
        ).logits[0]
    gold_t = torch.tensor(gold, dtype=torch.long, device=device)
    return _mean_gold_logprob(logits.view(*rows.shape, -1), gold_t).cpu()


def reference_scores(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    episodes: Sequence[Episode],
    gold_answers: Mapping[int, str],
    packed: bool = True,
) -> list[torch.Tensor]:
    """ℓ_0..ℓ_T of every episode (one tensor per episode, len(boundaries) values).

    Prefixes are the hint-free prompt (`train_prompt_ids`) plus the completion up to each boundary;
    `gold_answers` maps a seed to its gold answer text (`env.gold_answer(seed)`).
    """
    score = score_packed if packed else score_prefixes
    results = []
    for episode in episodes:
        gold = tokenizer(gold_answers[episode.seed], add_special_tokens=False)["input_ids"]
        ids = episode.train_prompt_ids + episode.completion_ids
        offset = len(episode.train_prompt_ids)
        results.append(score(model, ids, [offset + b for b in episode.boundaries], gold))
    return results
