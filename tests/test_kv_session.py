"""The session's shortcuts change no token: a shared prefix held once (its attention against plain
attention over the whole row, its greedy tokens against a full forward per step), and oneDNN-packed
weights (the same products, repacked when a weight changes)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from tracegym.generation import HFBackend, SamplingConfig, render_chat
from tracegym.kv_session import CacheEntry, PackedLinears, SharedPrefix, _onednn, shared_prefix_attention

SYSTEM = "You answer questions about the hotel. Be brief, be exact, and never make anything up. " * 3


@pytest.fixture(scope="module")
def varied():
    """The tiny model with a random untied output layer, so its greedy text varies with the context."""
    from tracegym.models import tiny_model

    model, tokenizer = tiny_model(seed=3)
    model.lm_head = nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=False)
    nn.init.normal_(model.lm_head.weight, generator=torch.Generator().manual_seed(5))
    model.config.tie_word_embeddings = False
    return model, tokenizer


def _greedy_reference(model: nn.Module, prompt: list[int], steps: int) -> list[int]:
    """Greedy tokens from a full forward over the whole sequence at every step (no cache)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def _prompts(tokenizer, questions: list[str]) -> list[list[int]]:
    return [
        render_chat(tokenizer, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
        for q in questions
    ]


def test_shared_prefix_attention_equals_attention_over_the_whole_row():
    torch.manual_seed(0)
    layers, kv_heads, heads, dim, length, own, rows = 2, 2, 4, 8, 40, 6, 3
    keys, values = torch.randn(layers, kv_heads, length, dim), torch.randn(layers, kv_heads, length, dim)
    prefix = SharedPrefix(CacheEntry(np.arange(length), keys, values))
    for width in (1, 3):  # a decode step, and a block of new tokens
        query = torch.randn(rows, heads, width, dim)
        key, value = torch.randn(rows, kv_heads, own, dim), torch.randn(rows, kv_heads, own, dim)
        mask = torch.rand(rows, 1, width, own) > 0.4
        whole_keys = torch.cat([keys[1].expand(rows, -1, -1, -1), key], 2).repeat_interleave(heads // kv_heads, 1)
        whole_values = torch.cat([values[1].expand(rows, -1, -1, -1), value], 2).repeat_interleave(heads // kv_heads, 1)
        whole_mask = torch.cat([torch.ones(rows, 1, width, length, dtype=torch.bool), mask], -1)
        expected = nn.functional.scaled_dot_product_attention(
            query, whole_keys, whole_values, attn_mask=whole_mask, scale=dim**-0.5
        ).transpose(1, 2)
        for packed in (prefix.packed, None):  # oneDNN's kernels where available, and plain matmuls
            prefix.packed = packed
            out, _ = shared_prefix_attention(
                SimpleNamespace(layer_idx=1), query, key, value, mask, scaling=dim**-0.5, shared_prefix=prefix
            )
            assert torch.allclose(out, expected, atol=1e-5)


def test_a_prefix_held_once_gives_each_prompt_its_own_greedy_tokens(varied, monkeypatch):
    model, tokenizer = varied
    prompts = _prompts(tokenizer, ["alpha", "a longer question about beta and its rooms", "gamma"])
    held = []
    scores = SharedPrefix.scores
    monkeypatch.setattr(SharedPrefix, "scores", lambda self, *args: held.append(self.length) or scores(self, *args))
    params = SamplingConfig(max_new_tokens=10, temperature=0.0)
    together = HFBackend(model, tokenizer).generate(prompts, params)
    assert held and min(held) >= 32  # the system prompt was held once for the batch
    for prompt, completion in zip(prompts, together):
        assert completion.token_ids == _greedy_reference(model, prompt, len(completion.token_ids))


def test_later_turns_reuse_the_held_prefix_and_match_a_fresh_session(varied):
    model, tokenizer = varied
    prompts = _prompts(tokenizer, ["alpha", "beta", "gamma", "delta"])
    params = SamplingConfig(max_new_tokens=6, temperature=0.0)
    more = tokenizer(" and then?", add_special_tokens=False)["input_ids"]
    with HFBackend(model, tokenizer, batch_size=3).session() as session:
        first = session.generate(prompts, params)
        held = session.held
        follow = [p + c.token_ids + more for p, c in zip(prompts, first)]
        second = session.generate(follow, params)
        assert held is not None and session.held is held  # the same prefix, not copied and packed again
        # with a prompt that shares nothing, nothing is held: the caches are read through their prefix
        other = render_chat(tokenizer, [{"role": "user", "content": "an unrelated question"}])
        last = [p + c.token_ids + more for p, c in zip(follow, second)] + [other]
        third = session.generate(last, params)
    for prompts, completions in ((follow, second), (last, third)):
        fresh = [HFBackend(model, tokenizer).generate([p], params)[0] for p in prompts]
        assert [c.token_ids for c in completions] == [c.token_ids for c in fresh]
        assert all(
            torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
            for a, b in zip(completions, fresh)
        )


@pytest.mark.skipif(not _onednn(), reason="oneDNN's packed linear kernels are unavailable")
def test_packed_linears_compute_the_same_products_and_follow_weight_changes():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8, bias=False))
    x = torch.randn(5, 3, 16)
    packs = PackedLinears().update(net)
    with torch.no_grad():
        expected = net(x)
        with packs:
            assert torch.allclose(net(x), expected, atol=1e-5)
        assert "forward" not in vars(net[0]) and "forward" not in vars(net[2])  # their own forward again
        unchanged = packs.packed[net[2]][2]
        net[0].weight.mul_(2)  # an in-place change, as an optimizer step makes
        expected = net(x)
        with packs.update(net):
            assert torch.allclose(net(x), expected, atol=1e-5)
    assert packs.packed[net[2]][2] is unchanged  # only the changed weight was packed again
