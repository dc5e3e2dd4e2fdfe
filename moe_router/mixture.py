"""The routed LoRA mixture: every adapted linear layer holds the frozen base weight and every
capability's LoRA; a per-layer gate picks, for every token, one adapter or the base (top-1), or
top-k slots with renormalised weights.

Slots: 0 is the base (no LoRA), slot i ≥ 1 is adapter i - 1. The gate of decoder layer l reads the
hidden state entering that layer (RMS-normalised, then linear: logits over the slots) and routes
that layer's attention and MLP projections. Routing depends only on a token's own hidden state,
so it is causal and exact under the KV cache: a cached token keeps the keys and values its own
route produced.

`attach_mixture(model, adapters)` rebuilds a transformers causal LM in place (it stays a
`PreTrainedModel`, so `generate`, batching and the KV cache work unchanged) and returns its
`MixtureRouter`, which also holds the overrides: one slot for every token (a single adapter, or
the base), one slot per batch row (the task router), or explicit per-token routes (router
training's teacher forcing, tests).

Compute, grouped by slot, never a loop over tokens:
- `dense`: every token on one slot (forced routes, or a gate that agrees on the whole batch): one
  low-rank matmul pair on all tokens, none for the base;
- `stacked`: x @ concat(A) once, each adapter's rank block scaled by the token's routing weight
  (0 when not routed), then @ concat(B): three ops whatever the routing, but every token pays
  for every adapter's rank;
- `gather`: per active adapter, index_select its tokens, one matmul pair, index_add back: each
  token pays for its own adapters only, at a few ops per adapter;
- `auto` (default): `gather` from GATHER_FROM_TOKENS tokens in a forward pass (prefill), else
  `stacked` (decode).

The speed of each mode against the base model and a PEFT adapter: docs/engineering.md, "moe_router".
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from tracegym.errors import UserError
from tracegym.moe_router.lora_weights import AdapterWeights

Compute = Literal["auto", "stacked", "gather"]
BASE_SLOT = 0
GATHER_FROM_TOKENS = 1024  # `auto`: tokens in a forward pass from which `gather` is used
_EPS = 1e-6


def rms_normalise(hidden: torch.Tensor) -> torch.Tensor:
    """`hidden` (..., H) scaled to unit root-mean-square over H (what a gate reads)."""
    return F.rms_norm(hidden, hidden.shape[-1:], eps=_EPS)


def gate_logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, normalised: bool = False
) -> torch.Tensor:
    """Slot logits of `hidden` under gate `weight` (..., S, H) and `bias` (..., S); `hidden` is
    RMS-normalised first unless `normalised`.

    One layer: hidden (N, H), weight (S, H). All layers at once: hidden (L, N, H), weight (L, S, H).
    """
    normed = hidden if normalised else rms_normalise(hidden)
    if normed.dim() == 2:
        return torch.addmm(bias, normed, weight.T)
    return torch.baddbmm(bias.unsqueeze(-2), normed, weight.transpose(-1, -2))


def top_k_route(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Slots (..., k) and weights (..., k) of the k most likely slots, weights renormalised to sum
    to 1 (top-1: the argmax, weights None meaning 1)."""
    if k == 1:
        return logits.argmax(-1, keepdim=True), None
    values, slots = logits.softmax(-1).topk(k, dim=-1)
    return slots, values / values.sum(-1, keepdim=True)


@functools.lru_cache(maxsize=64)
def _column_slots(adapters: int, rank: int, device: torch.device) -> torch.Tensor:
    """The slot owning each column of a stacked (N, adapters · rank) low-rank activation."""
    return torch.arange(1, adapters + 1, device=device).repeat_interleave(rank)


@dataclass
class Route:
    """How the tokens of the current forward pass (flattened, N of them) use one layer's n adapters.

    `dense`: every token on this slot with weight 1 (no per-token work); else `slots` (N,): each
    token's one slot with weight 1 (top-1 gates), or `weights` (N, n): each adapter's weight per
    token, 0 where it is not routed.
    """

    adapters: int = 0
    dense: int | None = None
    slots: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    _groups: list[tuple[int, torch.Tensor, torch.Tensor]] | None = field(default=None, repr=False)
    _expanded: dict[tuple[int, torch.dtype], torch.Tensor] = field(default_factory=dict, repr=False)

    def adapter_weights(self) -> torch.Tensor:
        """(N, n): each adapter's weight per token."""
        if self.weights is None:
            assert self.slots is not None
            self.weights = F.one_hot(self.slots, self.adapters + 1)[:, 1:].float()
        return self.weights

    def groups(self) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
        """(adapter index, token indices, their weights) for each adapter with routed tokens (cached)."""
        if self._groups is None:
            weights = self.adapter_weights()
            self._groups = []
            for adapter in (weights != 0).any(0).nonzero().flatten().tolist():
                index = weights[:, adapter].nonzero().flatten()
                self._groups.append((adapter, index, weights[index, adapter]))
        return self._groups

    def expanded(self, rank: int, dtype: torch.dtype) -> torch.Tensor:
        """Each adapter's weight per token repeated over its `rank` columns: (N, n · rank) (cached)."""
        key = (rank, dtype)
        if key not in self._expanded:
            if self.weights is None and self.slots is not None:
                columns = _column_slots(self.adapters, rank, self.slots.device)
                self._expanded[key] = (self.slots.unsqueeze(1) == columns).to(dtype)
            else:
                self._expanded[key] = self.adapter_weights().to(dtype).repeat_interleave(rank, dim=1)
        return self._expanded[key]


class LayerState:
    """The route of one decoder layer, set by the router's hook and read by its linear layers."""

    def __init__(self) -> None:
        self.route = Route(dense=BASE_SLOT)


class RoutedLinear(nn.Module):
    """A frozen `nn.Linear` plus n LoRAs, stacked: `lora_A_T` (in, n · r) holds adapter a's A^T in
    columns a·r..(a+1)·r, `lora_B_T` (n · r, out) its (scaling · B)^T in the same rows; ranks are
    zero-padded to the largest."""

    def __init__(
        self, base: nn.Linear, lora_A: torch.Tensor, lora_B: torch.Tensor, state: LayerState, compute: Compute
    ) -> None:
        """`lora_A` (n, r, in), `lora_B` (n, out, r) with the scaling folded in."""
        super().__init__()
        self.base_layer = base
        n, out, rank = lora_B.shape
        self.register_buffer("lora_A_T", lora_A.permute(2, 0, 1).reshape(-1, n * rank).contiguous())
        self.register_buffer("lora_B_T", lora_B.permute(0, 2, 1).reshape(n * rank, out).contiguous())
        self.rank, self.state, self.compute = rank, state, compute

    @property
    def in_features(self) -> int:
        return self.base_layer.in_features

    @property
    def out_features(self) -> int:
        return self.base_layer.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base_layer(x)
        route = self.state.route
        if route.dense == BASE_SLOT:
            return out
        flat, out_flat = x.reshape(-1, x.shape[-1]), out.view(-1, out.shape[-1])
        if route.dense is not None:
            block = slice((route.dense - 1) * self.rank, route.dense * self.rank)
            out_flat.addmm_(flat @ self.lora_A_T[:, block], self.lora_B_T[block])
        elif self.compute == "stacked" or (self.compute == "auto" and flat.shape[0] < GATHER_FROM_TOKENS):
            out_flat.addmm_((flat @ self.lora_A_T).mul_(route.expanded(self.rank, flat.dtype)), self.lora_B_T)
        else:
            for adapter, index, weights in route.groups():
                block = slice(adapter * self.rank, (adapter + 1) * self.rank)
                low = (flat.index_select(0, index) @ self.lora_A_T[:, block]).mul_(weights.to(flat.dtype).unsqueeze(-1))
                out_flat.index_add_(0, index, low @ self.lora_B_T[block])
        return out


class MixtureRouter(nn.Module):
    """Per-layer gates over 1 + len(adapter_names) slots, and the routing overrides.

    Gates start at zero (every logit equal, so top-1 picks the base): an untrained router is the
    base model. Precedence of the routes: `routing_tokens` > `forced_slot` > `row_slots` (rows
    with -1 use the gates) > the gates.
    """

    def __init__(self, num_layers: int, hidden_size: int, adapter_names: Sequence[str], top_k: int = 1) -> None:
        super().__init__()
        self.adapter_names = list(adapter_names)
        self.num_slots = 1 + len(self.adapter_names)
        if not 1 <= top_k <= self.num_slots:
            raise ValueError(f"top_k must be in [1, {self.num_slots}], got {top_k}")
        self.top_k = top_k
        self.gate_weight = nn.Parameter(torch.zeros(num_layers, self.num_slots, hidden_size), requires_grad=False)
        self.gate_bias = nn.Parameter(torch.zeros(num_layers, self.num_slots), requires_grad=False)
        self.states = [LayerState() for _ in range(num_layers)]
        self.forced_slot: int | None = None
        self.row_slots: torch.Tensor | None = None
        self._token_route: tuple[torch.Tensor, torch.Tensor] | None = None
        self._recorded: list[torch.Tensor] | None = None
        self._captured: list[torch.Tensor] | None = None

    def slot_of(self, name: str) -> int:
        """Slot index of adapter `name` ("base" is slot 0)."""
        if name == "base":
            return BASE_SLOT
        if name not in self.adapter_names:
            raise KeyError(f"no adapter '{name}' in the mixture (adapters: {', '.join(self.adapter_names)})")
        return 1 + self.adapter_names.index(name)

    # -- overrides ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def forcing(self, slot: int | None) -> Iterator[None]:
        """Route every token to `slot` (None: no override) inside the block."""
        previous, self.forced_slot = self.forced_slot, slot
        try:
            yield
        finally:
            self.forced_slot = previous

    @contextlib.contextmanager
    def routing_rows(self, slots: torch.Tensor | Sequence[int] | None) -> Iterator[None]:
        """Route batch row b to `slots[b]` (-1: the gates decide) inside the block."""
        previous = self.row_slots
        self.row_slots = None if slots is None else torch.as_tensor(slots, dtype=torch.long)
        try:
            yield
        finally:
            self.row_slots = previous

    @contextlib.contextmanager
    def routing_tokens(self, slots: torch.Tensor, weights: torch.Tensor | None = None) -> Iterator[None]:
        """Explicit routes for the next forward passes: `slots` (B, T) or (B, T, k) with `weights`
        of the same shape (default 1): every layer uses them, whatever the gates say."""
        if slots.dim() == 2:
            slots = slots.unsqueeze(-1)
        weights = torch.ones(slots.shape) if weights is None else weights.reshape(slots.shape)
        previous, self._token_route = self._token_route, (slots.long(), weights)
        try:
            yield
        finally:
            self._token_route = previous

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[torch.Tensor]]:
        """Collect each layer's top-1 gate decision (B, T) for every forward pass in the block, in
        call order (layer 0 of the first pass first)."""
        previous, self._recorded = self._recorded, []
        try:
            yield self._recorded
        finally:
            self._recorded = previous

    @contextlib.contextmanager
    def capturing(self) -> Iterator[list[torch.Tensor]]:
        """Collect the hidden states (B, T, H) entering each layer, as its gate sees them, for every
        forward pass in the block, in call order."""
        previous, self._captured = self._captured, []
        try:
            yield self._captured
        finally:
            self._captured = previous

    # -- the per-layer hook ------------------------------------------------------------------

    def route_layer(self, layer: int, hidden: torch.Tensor) -> Route:
        """The route of `layer` for `hidden` (B, T, H), the hidden states entering it."""
        batch, length = hidden.shape[:2]
        if self._token_route is not None:
            slots, weights = self._token_route
            if slots.shape[:2] != (batch, length):
                raise ValueError(
                    f"token routes of shape {tuple(slots.shape[:2])} given for a forward pass "
                    f"of shape {(batch, length)}"
                )
            return self._weighted(slots.flatten(0, 1).to(hidden.device), weights.flatten(0, 1).to(hidden))
        if self.forced_slot is not None:
            return Route(dense=self.forced_slot)
        rows = self.row_slots
        if rows is not None:
            if rows.numel() != batch:
                raise ValueError(f"row routes for {rows.numel()} rows given for a batch of {batch}")
            if bool((rows >= 0).all()) and bool((rows == rows[0]).all()):
                return Route(dense=int(rows[0]))
        logits = gate_logits(hidden.reshape(-1, hidden.shape[-1]), self.gate_weight[layer], self.gate_bias[layer])
        slots, weights = top_k_route(logits, self.top_k)  # (N, k)
        if self._recorded is not None:
            self._recorded.append(slots[:, 0].view(batch, length))
        if rows is not None:  # forced rows: their slot first with weight 1, the rest weight 0
            per_token = rows.to(hidden.device).repeat_interleave(length)
            forced = per_token >= 0
            slots[forced, 0] = per_token[forced]
            if weights is not None:
                weights[forced] = 0.0
                weights[forced, 0] = 1.0
        if self.top_k == 1:
            top = slots[:, 0]
            if torch.equal(top, top[:1].expand_as(top)):
                return Route(dense=int(top[0]))
            return Route(self.num_slots - 1, slots=top)
        assert weights is not None
        return self._weighted(slots, weights)

    def _weighted(self, slots: torch.Tensor, weights: torch.Tensor) -> Route:
        """The route of tokens on `slots` (N, k) with `weights` (N, k)."""
        matrix = torch.zeros(slots.shape[0], self.num_slots, dtype=weights.dtype, device=weights.device)
        matrix.scatter_add_(1, slots, weights)
        return Route(self.num_slots - 1, weights=matrix[:, 1:])

    def _hook(self, layer: int):
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            hidden = args[0] if args else kwargs["hidden_states"]
            if self._captured is not None:
                self._captured.append(hidden.detach())
            self.states[layer].route = self.route_layer(layer, hidden)

        return hook


def decoder_layers(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The dotted path and the ModuleList of a causal LM's decoder layers (`model.layers` in Llama,
    Qwen, Mistral and the like)."""
    for path, module in model.named_modules():
        if (
            path.endswith("layers")
            and isinstance(module, nn.ModuleList)
            and len(module) == model.config.num_hidden_layers
        ):
            return path, module
    raise UserError(f"{type(model).__name__}: cannot find its decoder layers (a ModuleList named 'layers')")


def _stack(adapters: Sequence[AdapterWeights], path: str, base: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    """A (n, r, in) and pre-scaled B (n, out, r) of `path` across adapters, zero-padded to the
    largest rank (an adapter without this module gets zeros)."""
    rank = max(a.modules[path].A.shape[0] for a in adapters if path in a.modules)
    dtype, device = base.weight.dtype, base.weight.device
    stacked_A = torch.zeros(len(adapters), rank, base.in_features, dtype=dtype, device=device)
    stacked_B = torch.zeros(len(adapters), base.out_features, rank, dtype=dtype, device=device)
    for index, adapter in enumerate(adapters):
        pair = adapter.modules.get(path)
        if pair is None:
            continue
        if pair.A.shape[1] != base.in_features or pair.B.shape[0] != base.out_features:
            raise UserError(
                f"{adapter.path}: {path}: LoRA maps {pair.A.shape[1]} -> {pair.B.shape[0]} features but the base layer "
                f"maps {base.in_features} -> {base.out_features} (adapter trained on another base model?)"
            )
        stacked_A[index, : pair.A.shape[0]] = pair.A.to(dtype)
        stacked_B[index, :, : pair.A.shape[0]] = pair.B.to(dtype) * pair.scaling
    return stacked_A, stacked_B


def attach_mixture(
    model: nn.Module, adapters: Sequence[AdapterWeights], top_k: int = 1, compute: Compute = "auto"
) -> MixtureRouter:
    """Put `adapters` into `model` (in place) as routed linear layers; returns the router, also
    reachable as `model.moe_router`. The model's parameters are frozen."""
    if not adapters:
        raise UserError("a routed mixture needs at least one adapter")
    names = [a.name for a in adapters]
    if len(set(names)) != len(names):
        raise UserError(f"adapter names must be distinct, got {names}")
    prefix, layers = decoder_layers(model)
    model.requires_grad_(False)
    router = MixtureRouter(len(layers), model.config.hidden_size, names, top_k).to(next(model.parameters()).device)
    paths = sorted({path for adapter in adapters for path in adapter.modules})
    for path in paths:
        owner = next(a.path for a in adapters if path in a.modules)
        layer = path[len(prefix) + 1 :].split(".")[0]
        if not path.startswith(prefix + ".") or not layer.isdigit() or int(layer) >= len(layers):
            raise UserError(f"{owner}: LoRA on '{path}', outside the decoder layers: not supported by the mixture")
        try:
            base = model.get_submodule(path)
        except AttributeError:
            raise UserError(f"{owner}: the base model has no module '{path}'") from None
        if not isinstance(base, nn.Linear):
            raise UserError(f"{owner}: '{path}' is a {type(base).__name__}, not a linear layer")
        parent_path, _, child = path.rpartition(".")
        lora_A, lora_B = _stack(adapters, path, base)
        model.get_submodule(parent_path).register_module(
            child, RoutedLinear(base, lora_A, lora_B, router.states[int(layer)], compute)
        )
    for index, layer in enumerate(layers):
        layer.register_forward_pre_hook(router._hook(index), with_kwargs=True)
    model.moe_router = router
    return router


def set_compute(model: nn.Module, compute: Compute) -> None:
    """Switch every routed layer of `model` to `compute` ("auto", "stacked" or "gather")."""
    for module in model.modules():
        if isinstance(module, RoutedLinear):
            module.compute = compute
