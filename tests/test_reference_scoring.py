"""Packed reference scoring equals per-prefix scoring; the reference is the base model."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from tracegym.adapters.reference_scoring import packed_inputs, reference_scores, score_packed, score_prefixes
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
    assert torch.allclose(score_packed(model, ids, boundaries, GOLD[:1]), score_prefixes(model, ids, boundaries, GOLD[:1]), atol=1e-4)


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
