"""Routed LoRA mixture: exactness against PEFT and the base model, top-k, grouped compute, KV cache
and batching (tiny model, float32, random non-zero LoRAs)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model

from tracegym.adapters.lora import LORA_TARGETS
from tracegym.errors import UserError
from tracegym.models import tiny_model
from tracegym.moe_router.lora_weights import read_adapter
from tracegym.moe_router.mixture import GATHER_FROM_TOKENS, LayerState, Route, RoutedLinear, attach_mixture, set_compute

RANKS = (4, 8, 6)


@pytest.fixture(scope="module")
def base():
    return tiny_model()[0]


@pytest.fixture(scope="module")
def adapter_dirs(tmp_path_factory, base):
    """Three PEFT folders of random LoRAs (B not zero) on the tiny model, ranks 4, 8, 6; the third
    only on the attention projections."""
    folders = []
    for index, rank in enumerate(RANKS):
        torch.manual_seed(10 + index)
        targets = list(LORA_TARGETS if index < 2 else LORA_TARGETS[:4])
        config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets, init_lora_weights=False)
        folder = tmp_path_factory.mktemp(f"adapter{index}")
        get_peft_model(copy.deepcopy(base), config).save_pretrained(str(folder))
        folders.append(folder)
    return folders


@pytest.fixture()
def mixture(adapter_dirs, base):
    model = copy.deepcopy(base)
    router = attach_mixture(model, [read_adapter(f) for f in adapter_dirs])
    return model, router


def _ids(rows: int = 2, length: int = 14, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, 2000, (rows, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_forced_adapter_gives_that_adapters_peft_logits(adapter_dirs, mixture, base):
    model, router = mixture
    ids = _ids()
    base_logits = base(ids).logits
    for slot, folder in enumerate(adapter_dirs, start=1):
        expected = PeftModel.from_pretrained(copy.deepcopy(base), str(folder)).eval()(ids).logits
        assert (expected - base_logits).abs().max() > 1e-2  # the adapter changes the output
        with router.forcing(slot):
            assert (model(ids).logits - expected).abs().max() <= 1e-5


@torch.no_grad()
def test_forced_base_and_untrained_gates_give_the_base_models_logits(mixture, base):
    model, router = mixture
    ids = _ids()
    expected = base(ids).logits
    assert torch.equal(model(ids).logits, expected)  # zero gates: top-1 is the base slot
    router.gate_weight.normal_()
    with router.forcing(0):
        assert torch.equal(model(ids).logits, expected)


@torch.no_grad()
def test_top_k_with_one_hot_weights_equals_top_1(mixture):
    model, router = mixture
    router.gate_weight.normal_(generator=torch.Generator().manual_seed(1))
    ids = _ids()
    with router.recording() as decisions:
        top1 = model(ids).logits
    assert len({int(s) for d in decisions for s in d.flatten()}) > 2  # the gates really mix slots
    # explicit routes (every layer): top-2 with weights (1, 0) against top-1
    chosen = decisions[0]
    with router.routing_tokens(chosen):
        single = model(ids).logits
    pair = torch.stack([chosen, (chosen + 1) % router.num_slots], -1)
    with router.routing_tokens(pair, torch.stack([torch.ones(chosen.shape), torch.zeros(chosen.shape)], -1)):
        assert (model(ids).logits - single).abs().max() <= 1e-6
    # the gates' own top-2: renormalised weights mix two slots; made one-hot by sharp gates, top-1 again
    router.top_k = 2
    assert (model(ids).logits - top1).abs().max() > 1e-3
    router.gate_weight.mul_(1e4)
    router.gate_bias.mul_(1e4)
    assert (model(ids).logits - top1).abs().max() <= 1e-5


@pytest.mark.parametrize(
    "compute, tokens", [("stacked", 10), ("gather", 10), ("auto", 10), ("auto", GATHER_FROM_TOKENS + 6)]
)
@torch.no_grad()
def test_grouped_compute_equals_the_per_token_formula(compute, tokens):
    torch.manual_seed(0)
    base = torch.nn.Linear(16, 12)
    n, rank = 3, 4
    lora_A, lora_B = torch.randn(n, rank, 16), torch.randn(n, 12, rank)
    layer = RoutedLinear(base, lora_A, lora_B, LayerState(), compute)
    weights = torch.rand(tokens, n) * (torch.rand(tokens, n) > 0.5)  # some tokens on no adapter, some on several
    layer.state.route = Route(n, weights=weights)
    x = torch.randn(2, tokens // 2, 16)
    flat = x.reshape(-1, 16)
    expected = base(flat) + sum(weights[:, a : a + 1] * (flat @ lora_A[a].T @ lora_B[a].T) for a in range(n))
    assert (layer(x) - expected.view(2, tokens // 2, 12)).abs().max() <= 1e-4
    slots = torch.randint(0, n + 1, (tokens,))  # top-1 routes given by slot
    layer.state.route = Route(n, slots=slots)
    one_hot = torch.nn.functional.one_hot(slots, n + 1)[:, 1:].float()
    expected = base(flat) + sum(one_hot[:, a : a + 1] * (flat @ lora_A[a].T @ lora_B[a].T) for a in range(n))
    assert (layer(x) - expected.view(2, tokens // 2, 12)).abs().max() <= 1e-4


@torch.no_grad()
def test_stacked_and_gather_agree_on_the_whole_model(mixture):
    model, router = mixture
    router.gate_weight.normal_(generator=torch.Generator().manual_seed(2))
    router.top_k = 2
    ids = _ids()
    stacked = model(ids).logits
    set_compute(model, "gather")
    assert (model(ids).logits - stacked).abs().max() <= 1e-5


@torch.no_grad()
def test_generation_with_kv_cache_and_batching_equals_full_forward_passes(mixture):
    model, router = mixture
    router.gate_weight.normal_(generator=torch.Generator().manual_seed(3))
    prompts = [_ids(1, 9, seed=4)[0].tolist(), _ids(1, 5, seed=5)[0].tolist()]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=6,
        min_new_tokens=6,
        do_sample=False,
        pad_token_id=0,
        return_dict_in_generate=True,
        output_logits=True,
    )
    for row, prompt in enumerate(prompts):
        sequence = prompt + out.sequences[row, width:].tolist()
        full = model(torch.tensor([sequence])).logits[0]  # no cache, no padding, no batch
        for step in range(6):
            assert (out.logits[step][row] - full[len(prompt) - 1 + step]).abs().max() <= 1e-4
            assert sequence[len(prompt) + step] == int(full[len(prompt) - 1 + step].argmax())


@torch.no_grad()
def test_row_routes_mix_forced_and_gated_rows_in_one_batch(mixture):
    model, router = mixture
    router.gate_weight.normal_(generator=torch.Generator().manual_seed(6))
    ids = _ids(3)
    with router.routing_rows([2, -1, 0]):
        mixed = model(ids).logits
    gated = model(ids).logits
    for row, slot in ((0, 2), (2, 0)):
        with router.forcing(slot):
            assert (mixed[row] - model(ids).logits[row]).abs().max() <= 1e-5
    assert (mixed[1] - gated[1]).abs().max() <= 1e-5
    with router.routing_rows([1, 1]), pytest.raises(ValueError, match="row routes for 2 rows"):
        model(ids)


def test_unsupported_or_broken_adapters_are_refused_with_the_file_named(adapter_dirs, tmp_path):
    folder = tmp_path / "dora"
    folder.mkdir()
    config = json.loads((adapter_dirs[0] / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(UserError, match=r"dora.*adapter_config.json: unsupported LoRA setting use_dora=True"):
        read_adapter(folder)
    (folder / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="adapter_model.safetensors: cannot read adapter weights"):
        read_adapter(folder)
    (folder / "adapter_model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(UserError, match="adapter_model.safetensors: cannot read adapter weights"):
        read_adapter(folder)
    (folder / "adapter_config.json").write_text("{")
    with pytest.raises(UserError, match="adapter_config.json: not valid JSON"):
        read_adapter(folder)
    other, _ = tiny_model(hidden_size=32)
    with pytest.raises(UserError, match="adapter trained on another base model"):
        attach_mixture(other, [read_adapter(adapter_dirs[0])])


def test_adapters_for_modules_the_base_lacks_are_refused(adapter_dirs, base):
    adapter = read_adapter(adapter_dirs[0])
    for path in ("model.layers.7.self_attn.q_proj", "lm_head", "model.layers.0.self_attn.rotary"):
        pair = next(iter(adapter.modules.values()))
        odd = type(adapter)(adapter.name, adapter.path, {path: pair})
        with pytest.raises(UserError, match=str(adapter.path)):
            attach_mixture(copy.deepcopy(base), [odd])
