"""A fixed number of LoRA slots in a base model, filled and emptied while it serves.

`LoraSlots(model, count, rank)` turns every `nn.Linear` inside the decoder layers into the routed
mixture's `RoutedLinear` with `count` zeroed adapter blocks of `rank` columns each (slot 0 is the
base, slots 1..count the adapters), and routes batch rows through `MixtureRouter.routing_rows`
(no gates are trained: every row names its slot). `write(slot, adapter)` copies a LoRA's matrices
into a slot (a smaller rank is zero-padded, which computes the same), `clear(slot)` zeroes it;
`problems(adapter)` says why an adapter does not fit. A row on slot s computes
base(x) + scaling · B(A(x)) with that slot's matrices, as PEFT does.

Writing a slot while a batch runs would mix two adapters in one reply: callers hold the engine
(`Engine.exclusive`) around `write` and `clear`.
"""

from __future__ import annotations

import torch
from torch import nn

from tracegym.moe_router.lora_weights import AdapterWeights
from tracegym.moe_router.mixture import MixtureRouter, RoutedLinear, decoder_layers


class LoraSlots:
    """`count` adapter slots of rank `rank` in every linear layer of `model`'s decoder layers
    (in place; the model's parameters are frozen). `router` routes rows to slots; `layers` maps
    each adapted module's path (e.g. `model.layers.0.self_attn.q_proj`) to its routed layer."""

    def __init__(self, model: nn.Module, count: int, rank: int) -> None:
        if count < 1 or rank < 1:
            raise ValueError(f"LoRA slots need count and rank of at least 1, got {count} and {rank}")
        self.count, self.rank = count, rank
        prefix, layers = decoder_layers(model)
        model.requires_grad_(False)
        device = next(model.parameters()).device
        self.router = MixtureRouter(len(layers), model.config.hidden_size, [f"slot{i}" for i in range(1, count + 1)])
        self.router.to(device)
        self.layers: dict[str, RoutedLinear] = {}
        for index, layer in enumerate(layers):
            for name, module in list(layer.named_modules()):
                if not isinstance(module, nn.Linear):
                    continue
                weight = module.weight
                lora_A = torch.zeros(count, rank, module.in_features, dtype=weight.dtype, device=weight.device)
                lora_B = torch.zeros(count, module.out_features, rank, dtype=weight.dtype, device=weight.device)
                routed = RoutedLinear(module, lora_A, lora_B, self.router.states[index], "auto")
                parent, _, child = name.rpartition(".")
                (layer.get_submodule(parent) if parent else layer).register_module(child, routed)
                self.layers[f"{prefix}.{index}.{name}"] = routed
            layer.register_forward_pre_hook(self.router._hook(index), with_kwargs=True)
        model.moe_router = self.router

    def problems(self, adapter: AdapterWeights) -> list[str]:
        """Why `adapter` cannot go into a slot (empty when it can): a module this model does not
        adapt, a rank above the slots' rank, or other feature counts."""
        limit = self.rank
        found = []
        for path, pair in adapter.modules.items():
            layer = self.layers.get(path)
            if layer is None:
                found.append(f"LoRA on '{path}', which is not a linear layer of this model's decoder layers")
                continue
            rank = pair.A.shape[0]
            if rank > limit:
                found.append(f"'{path}' has LoRA rank {rank}, above this server's maximum {limit} (--max-lora-rank)")
            if pair.A.shape[1] != layer.in_features or pair.B.shape[0] != layer.out_features:
                found.append(
                    f"'{path}' maps {pair.A.shape[1]} -> {pair.B.shape[0]} features, this model's layer maps "
                    f"{layer.in_features} -> {layer.out_features} (an adapter of another base model)"
                )
        return found

    def write(self, slot: int, adapter: AdapterWeights) -> None:
        """Put `adapter` into `slot` (1..count), replacing what was there; it must fit (`problems`)."""
        block = self._block(slot)
        for path, layer in self.layers.items():
            layer.lora_A_T[:, block] = 0
            layer.lora_B_T[block] = 0
            pair = adapter.modules.get(path)
            if pair is None:
                continue
            columns = slice(block.start, block.start + pair.A.shape[0])
            dtype, device = layer.lora_A_T.dtype, layer.lora_A_T.device
            layer.lora_A_T[:, columns] = pair.A.to(dtype).T.to(device)
            layer.lora_B_T[columns] = (pair.B.to(dtype) * pair.scaling).T.to(device)

    def clear(self, slot: int) -> None:
        """Zero `slot`: rows routed to it compute the base model."""
        block = self._block(slot)
        for layer in self.layers.values():
            layer.lora_A_T[:, block] = 0
            layer.lora_B_T[block] = 0

    def _block(self, slot: int) -> slice:
        if not 1 <= slot <= self.count:
            raise ValueError(f"slot must be in [1, {self.count}], got {slot}")
        return slice((slot - 1) * self.rank, slot * self.rank)
