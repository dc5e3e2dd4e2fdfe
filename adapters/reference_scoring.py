"""ℓ_k = mean log π_ref(y* | S_k): the reference model's score of the gold answer after every
boundary prefix S_k of a trajectory (docs/method.md, "Turn credit").

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

A GRPO group's episodes share their prompt: `score_shared_prompt` encodes it once (minus its last
token, so that every boundary's scoring position lies in the row) and runs each episode's packed
row against its keys and values, the mask's first columns being the cached tokens. The grouped
scoring costs one prompt instead of one per episode, and attention of the rows only.

`score_prefixes` is the straightforward version (one forward per prefix), for tests and the
benchmark. The reference π_ref is the policy training started from: a PeftModel that holds the
frozen REFERENCE_ADAPTER (the warm start, tracegym.adapters.lora.add_reference) is scored with
that adapter active, any other PeftModel with its adapters disabled (the base model).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
from peft import PeftModel
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from tracegym.adapters.lora import REFERENCE_ADAPTER
from tracegym.adapters.policy_loss import PromptEncoding, encode_prompt
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


def reference_mode(model: torch.nn.Module) -> AbstractContextManager:
    """Context in which `model` is the reference (see the module docstring)."""
    if not isinstance(model, PeftModel):
        return nullcontext()
    return (
        _active_adapter(model, REFERENCE_ADAPTER) if REFERENCE_ADAPTER in model.peft_config else model.disable_adapter()
    )


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
def score_prefixes(
    model: PreTrainedModel, ids: Sequence[int], boundaries: Sequence[int], gold: Sequence[int]
) -> torch.Tensor:
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
    ids: Sequence[int],
    boundaries: Sequence[int],
    gold: Sequence[int],
    dtype: torch.dtype = torch.float32,
    start: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids (1, L), 4-D additive mask (1, 1, L, start + L), position_ids (1, L), scored rows
    (M, G)) of the packed row. The first `start` tokens of `ids` (at most min(boundaries) - 1) are
    not in the row: the model holds them in its cache, mask columns 0..start-1, which every row sees.
    Column c is trajectory token c."""
    _check(ids, boundaries, gold)
    if not 0 <= start < min(boundaries):
        raise ValueError(
            f"start must lie in [0, {min(boundaries) - 1}] (each gold copy is scored from the token before its "
            f"boundary), got {start}"
        )
    prefix_len, copy_len, copies = max(boundaries), len(gold) - 1, len(boundaries)
    own_len = prefix_len - start
    length = own_len + copies * copy_len
    input_ids = torch.tensor(list(ids[start:prefix_len]) + list(gold[:-1]) * copies, dtype=torch.long)
    allowed = torch.zeros(length, start + length, dtype=torch.bool)
    allowed[:own_len, :prefix_len] = torch.ones(own_len, prefix_len, dtype=torch.bool).tril(start)
    positions = torch.arange(start, start + length)
    rows = torch.empty(copies, len(gold), dtype=torch.long)
    own = torch.ones(copy_len, copy_len, dtype=torch.bool).tril()
    for j, b in enumerate(boundaries):
        first = own_len + j * copy_len  # the copy's first row
        allowed[first : first + copy_len, :b] = True
        allowed[first : first + copy_len, start + first : start + first + copy_len] = own
        positions[first : first + copy_len] = torch.arange(b, b + copy_len)
        rows[j, 0] = b - 1 - start
        rows[j, 1:] = torch.arange(first, first + copy_len)
    mask = torch.zeros(length, start + length, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return input_ids[None], mask[None, None], positions[None], rows


def _score_row(
    model: PreTrainedModel,
    ids: Sequence[int],
    boundaries: Sequence[int],
    gold: Sequence[int],
    prefix: PromptEncoding | None = None,
) -> torch.Tensor:
    """ℓ of each boundary from one packed forward pass, `prefix` holding the keys and values of the
    first tokens of `ids` per layer (none: the row starts at token 0). The caller sets the mode."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    start = prefix[0][0].shape[-2] if prefix else 0
    input_ids, mask, positions, rows = packed_inputs(ids, boundaries, gold, dtype, start)
    logits = model(
        input_ids=input_ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        logits_to_keep=rows.flatten().to(device),
        cache=DynamicCache(list(prefix))
        if prefix
        else None,  # a fresh cache each row: the prefix tensors stay as they are
        use_cache=bool(prefix),
    ).logits[0]
    gold_t = torch.tensor(gold, dtype=torch.long, device=device)
    return _mean_gold_logprob(logits.view(*rows.shape, -1), gold_t).cpu()


@torch.no_grad()
def score_packed(
    model: PreTrainedModel, ids: Sequence[int], boundaries: Sequence[int], gold: Sequence[int]
) -> torch.Tensor:
    """ℓ for each prefix ids[:b], b in `boundaries` (absolute positions), in one packed forward pass."""
    with reference_mode(model):
        return _score_row(model, ids, boundaries, gold)


@torch.no_grad()
def score_shared_prompt(
    model: PreTrainedModel, prompt: Sequence[int], items: Sequence[tuple[Sequence[int], Sequence[int], Sequence[int]]]
) -> list[torch.Tensor]:
    """ℓ of each (ids, boundaries, gold) of `items`, whose ids all start with `prompt` and whose
    boundaries all lie at or past its end (a GRPO group's episodes): the prompt minus its last token
    is encoded once, and each item's packed row attends to its cache."""
    if any(list(ids[: len(prompt)]) != list(prompt) or min(b) < len(prompt) for ids, b, _ in items):
        raise ValueError("every item must start with the shared prompt and have its boundaries at or past its end")
    device = next(model.parameters()).device
    with reference_mode(model):
        prefix = encode_prompt(model, torch.tensor(list(prompt), device=device)) if len(prompt) > 1 else None
        return [_score_row(model, ids, boundaries, gold, prefix) for ids, boundaries, gold in items]


def reference_scores(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    episodes: Sequence[Episode],
    gold_answers: Mapping[int, str],
    packed: bool = True,
) -> list[torch.Tensor]:
    """ℓ_0..ℓ_T of every episode (one tensor per episode, len(boundaries) values).

    Prefixes are the hint-free prompt (`train_prompt_ids`) plus the completion up to each boundary;
    `gold_answers` maps a seed to its gold answer text (`env.gold_answer(seed)`). Packed, the
    episodes that share a prompt (a group's) share its encoding (`score_shared_prompt`).
    """
    items, groups = [], {}
    for index, episode in enumerate(episodes):
        gold = tokenizer(gold_answers[episode.seed], add_special_tokens=False)["input_ids"]
        offset = len(episode.train_prompt_ids)
        items.append(
            (episode.train_prompt_ids + episode.completion_ids, [offset + b for b in episode.boundaries], gold)
        )
        groups.setdefault(tuple(episode.train_prompt_ids), []).append(index)
    if not packed:
        return [score_prefixes(model, *item) for item in items]
    scores: dict[int, torch.Tensor] = {}
    for prompt, indices in groups.items():
        scores.update(zip(indices, score_shared_prompt(model, prompt, [items[i] for i in indices])))
    return [scores[index] for index in range(len(items))]
