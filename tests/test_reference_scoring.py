"""Packed reference scoring equals per-prefix scoring; the reference is the base model."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from tracegym.adapters.reference_scoring import (
    packed_inputs,
    reference_scores,
    score_packed,
    score_prefixes,
    score_shared_prompt,
)
from tracegym.models import tiny_model
from tracegym.rollout import Episode

GOLD = [812, 33, 4021, 19, 7]


def _trajectory(length: int = 90, seed: int = 0) -> list[int]:
    return torch.randint(3, 5000, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_equals_per_prefix(attn):
    model, _ = tiny_model(seed=1)
    model.config._attn_implementation = attn
    ids, boundaries = _trajectory(), [12, 30, 31, 55, 90]
    packed = score_packed(model, ids, boundaries, GOLD)
    single = score_prefixes(model, ids, boundaries, GOLD)
    assert packed.shape == (5,)
    assert torch.allclose(packed, single, atol=1e-4), (packed, single)
    # the scores differ between prefixes, so a mask leaking between copies would show
    assert packed.max() - packed.min() > 1e-3
    # a one-token gold answer needs no copies at all
    assert torch.allclose(
        score_packed(model, ids, boundaries, GOLD[:1]), score_prefixes(model, ids, boundaries, GOLD[:1]), atol=1e-4
    )


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_a_shared_prompt_encoded_once_scores_as_each_prefix_alone(attn):
    model, _ = tiny_model(seed=1)
    model.config._attn_implementation = attn
    prompt = _trajectory(20, seed=4)
    items = [
        (prompt + _trajectory(70, seed=5), [20, 31, 55, 90], GOLD),
        (prompt + _trajectory(40, seed=6), [21, 60], GOLD),
        (prompt + _trajectory(30, seed=7), [25, 50], GOLD[:1]),
    ]
    shared = score_shared_prompt(model, prompt, items)
    for scores, (ids, boundaries, gold) in zip(shared, items):
        assert torch.allclose(scores, score_prefixes(model, ids, boundaries, gold), atol=1e-4), scores
    assert shared[0].max() - shared[0].min() > 1e-3
    with pytest.raises(ValueError, match="shared prompt"):
        score_shared_prompt(model, prompt, [(prompt + [5, 6, 7], [19, 23], GOLD)])  # a boundary inside the prompt


def test_packed_layout_after_a_cached_prefix():
    input_ids, mask, positions, rows = packed_inputs([10, 11, 12, 13], [2, 4], [7, 8, 9], start=1)
    assert input_ids.tolist() == [[11, 12, 13, 7, 8, 7, 8]]
    assert positions.tolist() == [[1, 2, 3, 2, 3, 4, 5]]
    allowed = (mask[0, 0] == 0).int().tolist()  # column 0 is the cached token 10
    assert allowed[0] == [1, 1, 0, 0, 0, 0, 0, 0] and allowed[2] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert allowed[3] == [1, 1, 0, 0, 1, 0, 0, 0]  # copy 0 sees tokens 10, 11 and itself
    assert allowed[6] == [1, 1, 1, 1, 0, 0, 1, 1]
    assert rows.tolist() == [[0, 3, 4], [2, 5, 6]]
    with pytest.raises(ValueError, match="start"):
        packed_inputs([10, 11, 12, 13], [2, 4], [7, 8, 9], start=2)


def test_packed_layout():
    input_ids, mask, positions, rows = packed_inputs([10, 11, 12, 13], [2, 4], [7, 8, 9])
    assert input_ids.tolist() == [[10, 11, 12, 13, 7, 8, 7, 8]]
    assert positions.tolist() == [[0, 1, 2, 3, 2, 3, 4, 5]]
    allowed = (mask[0, 0] == 0).int().tolist()
    assert allowed[4] == [1, 1, 0, 0, 1, 0, 0, 0]  # copy 0 sees its prefix (2 tokens) and itself
    assert allowed[5] == [1, 1, 0, 0, 1, 1, 0, 0]
    assert allowed[7] == [1, 1, 1, 1, 0, 0, 1, 1]  # copy 1 sees all 4 and its own tokens only
    assert rows.tolist() == [[1, 4, 5], [3, 6, 7]]


def test_reference_is_the_base_model_with_adapters_off():
    model, tokenizer = tiny_model(seed=2)
    ids, boundaries = _trajectory(40, seed=3), [10, 25, 40]
    base = score_packed(model, ids, boundaries, GOLD)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    with torch.no_grad():
        adapted = peft_model(input_ids=torch.tensor([ids + GOLD])).logits
        with peft_model.disable_adapter():
            plain = peft_model(input_ids=torch.tensor([ids + GOLD])).logits
    assert (adapted - plain).abs().max() > 1e-3  # the adapter changes the policy...
    assert torch.allclose(score_packed(peft_model, ids, boundaries, GOLD), base, atol=1e-5)  # ...not the reference
    # episodes: prefixes are the hint-free prompt plus the completion up to each boundary
    episode = Episode(5, True, [], ids[:7], ids[:10], ids[10:], [1] * 30, [0.0] * 30, [0] * 30, [0, 15, 30], 1.0, {})
    gold_text = tokenizer.decode(GOLD)
    gold_ids = tokenizer(gold_text, add_special_tokens=False)["input_ids"]
    (scores,) = reference_scores(peft_model, tokenizer, [episode], {5: gold_text})
    assert torch.allclose(scores, score_prefixes(peft_model, ids, [10, 25, 40], gold_ids), atol=1e-4)
