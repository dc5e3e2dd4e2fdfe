"""Router training: per-layer gates fitted on hidden states of labelled tokens, base and adapters
frozen (docs/method.md, "Routed mixture": cross-entropy plus 0.001 × load balance, a slot for the
base and one per capability).

1. Features. Each training dialogue runs through the mixture with its labels as the routes
   (teacher forcing: the hidden states a correct router would see), and the hidden state entering
   every layer is kept for up to `tokens_per_slot` randomly drawn tokens per slot (balanced
   classes; the system prompts alone would otherwise outnumber the assistant turns several-fold).
2. Gates. All layers' gates at once, Adam on random token batches of the cached features: mean over layers of
   cross-entropy against the labels, plus `load_balance` × the Switch-Transformer term
   S · Σ_s f_s · P_s (f_s: share of tokens whose top-1 is s, P_s: mean probability of s).
3. Held-out accuracy. Held-out dialogues run free (the gates decide, as in serving; a layer's
   hidden states depend on the routes earlier layers picked) and every layer's top-1 choice is
   compared with the token's label.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from tracegym.errors import UserError
from tracegym.moe_router.config import RouterTrainingConfig
from tracegym.moe_router.mixture import BASE_SLOT, MixtureRouter, gate_logits, rms_normalise
from tracegym.moe_router.router_data import LabelledDialogue, RouterData


@torch.no_grad()
def layer_features(
    model: nn.Module, router: MixtureRouter, dialogues: Sequence[LabelledDialogue], tokens_per_slot: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMS-normalised hidden states (L, N, H) entering each layer for up to `tokens_per_slot`
    tokens per slot, drawn at random, under teacher-forced routes; and their labels (N,)."""
    by_slot: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for index, dialogue in enumerate(dialogues):
        for position, label in enumerate(dialogue.labels):
            by_slot[label].append((index, position))
    missing = [name for slot, name in enumerate(router.adapter_names, start=1) if not by_slot.get(slot)]
    if missing:
        raise UserError(
            f"no training tokens for {', '.join(missing)}: its assistant turns start after the dialogue cut; "
            "raise --router-max-tokens"
        )
    generator = torch.Generator().manual_seed(seed)
    chosen: dict[int, list[int]] = defaultdict(list)
    for _slot, places in sorted(by_slot.items()):  # in slot order: the generator's draws follow it
        for pick in torch.randperm(len(places), generator=generator)[:tokens_per_slot].tolist():
            chosen[places[pick][0]].append(places[pick][1])
    features, labels = [], []
    device = next(model.parameters()).device
    for index in tqdm(sorted(chosen), desc="router features", unit="dialogue", leave=False):
        dialogue, positions = dialogues[index], torch.tensor(sorted(chosen[index]))
        ids = torch.tensor([dialogue.input_ids], device=device)
        with router.routing_tokens(torch.tensor([dialogue.labels])), router.capturing() as hidden:
            model(input_ids=ids, use_cache=False, logits_to_keep=1)
        features.append(torch.stack([rms_normalise(h[0, positions.to(device)].float()).cpu() for h in hidden]))
        labels.append(torch.tensor(dialogue.labels)[positions])
    return torch.cat(features, dim=1), torch.cat(labels)


def train_gates(
    features: torch.Tensor, labels: torch.Tensor, num_slots: int, config: RouterTrainingConfig
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Gate weight (L, S, H) and bias (L, S) fitted to normalised `features` (L, N, H) and `labels`
    (N,) by Adam on random batches of `config.gate_batch` tokens (every layer at once); returns
    them with the last batch's loss terms and the accuracy on all tokens."""
    layers, count, hidden = features.shape
    weight = torch.zeros(layers, num_slots, hidden, requires_grad=True)
    bias = torch.zeros(layers, num_slots, requires_grad=True)
    optimiser = torch.optim.Adam([weight, bias], lr=config.learning_rate)
    generator = torch.Generator().manual_seed(config.seed)
    for _ in range(config.steps):
        batch = torch.randint(count, (min(config.gate_batch, count),), generator=generator)
        logits = gate_logits(features[:, batch], weight, bias, normalised=True)  # (L, B, S)
        cross_entropy = F.cross_entropy(logits.reshape(-1, num_slots), labels[batch].repeat(layers))
        balance = load_balance_loss(logits)
        loss = cross_entropy + config.load_balance * balance
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        accuracy = (gate_logits(features, weight, bias, normalised=True).argmax(-1) == labels).float().mean().item()
    log = {"cross_entropy": cross_entropy.item(), "load_balance": balance.item(), "train_accuracy": accuracy}
    return weight.detach(), bias.detach(), log


def load_balance_loss(logits: torch.Tensor) -> torch.Tensor:
    """Switch-Transformer balance term S · Σ_s f_s · P_s of `logits` (L, N, S), averaged over layers
    (1 when the load is uniform; f carries no gradient)."""
    num_slots = logits.shape[-1]
    probs = logits.softmax(-1)
    share = F.one_hot(logits.argmax(-1), num_slots).float().mean(-2)
    return num_slots * (share * probs.mean(-2)).sum(-1).mean()


@torch.no_grad()
def routing_accuracy(
    model: nn.Module, router: MixtureRouter, dialogues: Sequence[LabelledDialogue], heldout_family: str | None
) -> dict[str, Any]:
    """Free-running top-1 routing against the labels of `dialogues`: accuracy per slot (over every
    layer's decision for every token), balanced over slots, per layer, and for `heldout_family`
    the share of its tokens routed to the base."""
    names = ["base", *router.adapter_names]
    correct = torch.zeros(len(router.states), router.num_slots)
    counts = torch.zeros(router.num_slots)
    unseen_base = unseen_total = 0
    device = next(model.parameters()).device
    for dialogue in tqdm(dialogues, desc="routing accuracy", unit="dialogue", leave=False):
        labels = torch.tensor(dialogue.labels)
        with router.recording() as decisions:
            model(input_ids=torch.tensor([dialogue.input_ids], device=device), use_cache=False, logits_to_keep=1)
        chosen = torch.stack([d[0].cpu() for d in decisions])  # (L, T)
        if dialogue.family == heldout_family:
            unseen_base += int((chosen == BASE_SLOT).sum())
            unseen_total += chosen.numel()
            continue
        hits = (chosen == labels).float()
        correct.index_add_(1, labels, hits)
        counts += torch.bincount(labels, minlength=router.num_slots)
    present = counts > 0
    per_slot_layer = correct / counts.clamp(min=1)  # (L, S)
    per_slot = per_slot_layer.mean(0)
    metrics: dict[str, Any] = {
        "balanced_accuracy": round(per_slot[present].mean().item(), 4),
        "per_slot": {
            names[s]: {"accuracy": round(per_slot[s].item(), 4), "tokens": int(counts[s])}
            for s in range(router.num_slots)
            if present[s]
        },
        "per_layer": [round(row[present].mean().item(), 4) for row in per_slot_layer],
    }
    if heldout_family is not None:
        metrics["heldout_family"] = {
            "family": heldout_family,
            "routed_to_base": round(unseen_base / max(unseen_total, 1), 4),
        }
    return metrics


def train_router(
    model: nn.Module, router: MixtureRouter, data: RouterData, config: RouterTrainingConfig
) -> dict[str, Any]:
    """Fit `router`'s gates on `data.train` (in place) and measure them on `data.heldout`; returns
    the metrics (training loss terms, held-out accuracy, seconds per phase)."""
    started = time.perf_counter()
    features, labels = layer_features(model, router, data.train, config.tokens_per_slot, config.seed)
    featured = time.perf_counter()
    weight, bias, log = train_gates(features, labels, router.num_slots, config)
    trained = time.perf_counter()
    router.gate_weight.copy_(weight.to(router.gate_weight))
    router.gate_bias.copy_(bias.to(router.gate_bias))
    heldout = routing_accuracy(model, router, data.heldout, data.heldout_family)
    return {
        "training": {
            **{k: round(v, 4) for k, v in log.items()},
            "tokens": int(labels.numel()),
            "tokens_per_slot": torch.bincount(labels, minlength=router.num_slots).tolist(),
            "dialogues": len(data.train),
            "base_families": data.base_families,
        },
        "heldout": {**heldout, "dialogues": len(data.heldout)},
        "seconds": {
            "features": round(featured - started, 1),
            "gates": round(trained - featured, 1),
            "heldout": round(time.perf_counter() - trained, 1),
        },
    }
