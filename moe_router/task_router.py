"""The method's first-version router (docs/method.md, "Routed mixture", v1): once per task, the base
model reads the capability descriptions, each with a label letter (A, B, ... and a last letter for
"no adapter"), and the task (the first user message); the label token with the highest next-token
logit picks the adapter for the whole conversation. A baseline for the token router, and a
fallback.

`enable_task_routing(model, tokenizer, task_router)` makes a mixture route that way by itself:
on every forward pass that starts sequences (empty KV cache) it reads each row's first user
message from its token ids, asks the task router (cached per task text), and routes the row to
the chosen slot; forward passes that continue cached sequences keep those rows' choices. So
`generate` (and `HFBackend`) drive it like any model. A cached forward pass with a different
number of rows than the one that started them is refused: the choices would not line up.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from tracegym.generation import render_chat
from tracegym.moe_router.mixture import BASE_SLOT, MixtureRouter
from tracegym.schema import Message

LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_SENTINEL = "\ue000"  # a private-use character no chat template writes


def label_token_ids(tokenizer: PreTrainedTokenizerBase, count: int) -> list[int]:
    """Token ids of the first `count` label letters; each must be a single token."""
    if count > len(LABELS):
        raise ValueError(f"the task router labels at most {len(LABELS)} choices, got {count}")
    ids = []
    for letter in LABELS[:count]:
        tokens = tokenizer(letter, add_special_tokens=False)["input_ids"]
        if len(tokens) != 1:
            raise ValueError(f"label {letter!r} is {len(tokens)} tokens in this tokenizer; the task router needs one")
        ids.append(tokens[0])
    return ids


def task_prompt(capabilities: Sequence[tuple[str, str]], task: str) -> list[Message]:
    """The classification dialogue: the labelled capability (name, description) list, a last label
    for "none of these", and the task."""
    lines = [
        f"{LABELS[i]}: {name.replace('_', ' ')}. {description}" for i, (name, description) in enumerate(capabilities)
    ]
    lines.append(f"{LABELS[len(capabilities)]}: none of these; the task needs no specialist.")
    choices = "\n".join(lines)
    return [
        Message(role="system", content="You route tasks to the specialist whose capability the task needs most."),
        Message(
            role="user",
            content=f"Task:\n{task.strip()}\n\nCapabilities:\n{choices}\n\n"
            "Answer with the letter of one capability only.",
        ),
    ]


class TaskRouter:
    """Picks one slot per task with the base model (the mixture forced to the base slot).

    `capabilities`: (name, description) per adapter, in slot order (adapter i is slot i + 1)."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        router: MixtureRouter,
        capabilities: Sequence[tuple[str, str]],
    ) -> None:
        if len(capabilities) != len(router.adapter_names):
            raise ValueError(f"{len(capabilities)} descriptions for {len(router.adapter_names)} adapters")
        self.model, self.tokenizer, self.router = model, tokenizer, router
        self.capabilities = list(capabilities)
        self.labels = torch.tensor(label_token_ids(tokenizer, len(capabilities) + 1))
        self.busy = False
        self._choose_one = lru_cache(maxsize=4096)(self._choose_uncached)

    def choose(self, tasks: Sequence[str]) -> list[int]:
        """The slot for each task: adapter i + 1 for label i, the base for the last label."""
        return [self._choose_one(task) for task in tasks]

    @torch.no_grad()
    def _choose_uncached(self, task: str) -> int:
        ids = render_chat(self.tokenizer, task_prompt(self.capabilities, task))
        device = next(self.model.parameters()).device
        self.busy = True
        try:
            with self.router.forcing(BASE_SLOT):
                logits = self.model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0, -1]
        finally:
            self.busy = False
        choice = int(logits[self.labels.to(device)].argmax())
        return BASE_SLOT if choice == len(self.capabilities) else choice + 1


class UserTurnReader:
    """Finds the first user message in a chat-template token sequence, for templates that wrap each
    message the same way (ChatML and the like): the text between the first user header and the
    next end of turn."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        text = tokenizer.decode(
            render_chat(
                tokenizer,
                [Message(role="system", content=_SENTINEL), Message(role="user", content=_SENTINEL + _SENTINEL)],
                add_generation_prompt=False,
            )
        )
        first, second = text.index(_SENTINEL), text.index(_SENTINEL * 2)
        closing = text[second + 2 :].rstrip()  # what ends a message (ChatML: <|im_end|>)
        between = text[first + 1 : second]  # the system message's end, then the user header
        if not closing or not between.startswith(closing):
            raise ValueError("chat template does not close messages the same way; the task router cannot read it")
        self.header, self.end = between[len(closing) :].lstrip(), closing

    def first_user_message(self, ids: Sequence[int]) -> str | None:
        text = self.tokenizer.decode(list(ids))
        start = text.find(self.header)
        if start < 0:
            return None
        start += len(self.header)
        stop = text.find(self.end, start)
        return text[start : stop if stop >= 0 else len(text)]


def enable_task_routing(model: nn.Module, tokenizer: PreTrainedTokenizerBase, task_router: TaskRouter) -> None:
    """Make `model` (a mixture) route each conversation to the task router's choice by itself."""
    reader = UserTurnReader(tokenizer)
    router = task_router.router

    def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        if task_router.busy:
            return
        cache = next((kwargs[k] for k in ("cache", "past_key_values") if kwargs.get(k) is not None), None)
        if cache is not None and cache.get_seq_length() > 0:
            return  # continuing cached rows: keep their choices (route_layer checks the row count)
        ids = args[0] if args else kwargs.get("input_ids")
        if ids is None:
            raise ValueError("task routing reads the task from input_ids; inputs_embeds alone are not supported")
        mask = kwargs.get("attention_mask")
        rows = []
        for row in range(ids.shape[0]):
            tokens = ids[row] if mask is None or mask.dim() != 2 else ids[row][mask[row].bool()]
            task = reader.first_user_message(tokens.tolist())
            rows.append(BASE_SLOT if task is None else task_router.choose([task])[0])
        router.row_slots = torch.tensor(rows)

    model.register_forward_pre_hook(hook, with_kwargs=True)
