"""What `tracegym serve` serves: a routed folder or a base model with LoRA adapters, loaded, with the
engine that generates for it and the model ids that route to it (`server` puts HTTP around it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from tracegym.errors import UserError
from tracegym.moe_router.chat_api import RequestError
from tracegym.moe_router.config import ServeConfig
from tracegym.moe_router.engine import GATED, Engine
from tracegym.moe_router.folder import MANIFEST_FILE, load_mixture, task_router_for
from tracegym.moe_router.lora_registry import BaseIdentity, LoraRegistry
from tracegym.moe_router.lora_slots import LoraSlots
from tracegym.moe_router.mixture import BASE_SLOT

Route = tuple[int | None, str | None]  # (slot, adapter name): what a model id asks the engine for


@dataclass
class Served:
    """What one server serves: its engine and tokenizer, the context window (tokens), the
    /v1/models entries, how a model id routes (RequestError 404 for an unknown one), and the
    LoRA registry of a base model (None for a routed folder)."""

    engine: Engine
    tokenizer: PreTrainedTokenizerBase
    context: int
    cards: Callable[[], list[dict[str, Any]]]
    route: Callable[[str], Route]
    registry: LoraRegistry | None = None


def is_routed_folder(model: str | Path) -> bool:
    """Whether `model` is a folder `tracegym route` wrote (it holds router.json)."""
    return (Path(model) / MANIFEST_FILE).is_file()


def load_served(model: str, config: ServeConfig) -> Served:
    """`model` loaded for serving: a routed folder, else a base model with `config.lora` adapters.
    Raises UserError for a model or adapter that cannot be served."""
    if is_routed_folder(model):
        if config.lora or config.lora_root:
            raise UserError(
                f"{model} is a routed folder, whose adapters are fixed: --lora and --lora-root need a base model"
            )
        return serve_routed(model, config)
    return serve_base(model, config)


def _card(model_id: str, created: int, **extra: Any) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "tracegym", **extra}


def _not_found(model_id: str, served: list[str]) -> RequestError:
    return RequestError(404, f"model '{model_id}' not found; served: {', '.join(served)}", "model_not_found")


def serve_routed(folder: str, config: ServeConfig) -> Served:
    """The routed folder `folder`: its mixture under NAME, NAME:task, NAME:base and NAME:<adapter>."""
    model, tokenizer, router, manifest = load_mixture(folder)
    task_router = task_router_for(model, tokenizer, router, manifest)
    engine = Engine(
        model,
        tokenizer,
        router,
        lambda task: task_router.choose([task])[0],
        config.max_batch_size,
        config.max_queue,
        config.batch_wait_ms / 1000,
    )
    name, created = config.model_name, int(time.time())
    routes: dict[str, int | None] = {name: GATED, f"{name}:task": None, f"{name}:base": BASE_SLOT}
    routes.update({f"{name}:{adapter}": router.slot_of(adapter) for adapter in router.adapter_names})

    def route(model_id: str) -> Route:
        if model_id not in routes:
            raise _not_found(model_id, list(routes))
        return routes[model_id], None

    return Served(engine, tokenizer, _context(model, config), lambda: [_card(m, created) for m in routes], route, None)


def serve_base(given: str, config: ServeConfig) -> Served:
    """The base model `given` (as `tracegym train --model` takes it) under NAME, with
    `config.max_loras` LoRA slots and the `config.lora` adapters loaded, each under its own name.
    Raises UserError for a model or an adapter that cannot be served."""
    from tracegym.adapters.train import load_base
    from tracegym.models import check_model

    folder = Path(given).expanduser()
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise UserError(f"{given}: neither a routed folder ({MANIFEST_FILE}) nor a model folder (config.json)")
    check_model(given)
    model, tokenizer = load_base(given)
    slots = LoraSlots(model, config.max_loras, config.max_lora_rank)
    name, created = config.model_name, int(time.time())
    registry = LoraRegistry(slots, BaseIdentity(given, model), name, config.lora_root)

    def no_task_router(task: str) -> int:
        raise RuntimeError("a base model has no task router")

    engine = Engine(
        model,
        tokenizer,
        slots.router,
        no_task_router,
        config.max_batch_size,
        config.max_queue,
        config.batch_wait_ms / 1000,
        adapter_slot=registry.slot_of,
    )
    registry.exclusive = engine.exclusive
    for entry in config.lora:
        adapter, _, path = entry.partition("=")
        try:
            registry.load(adapter, path)
        except RequestError as error:
            raise UserError(f"--lora {entry}: {error.message}") from None
    context = _context(model, config)

    def cards() -> list[dict[str, Any]]:
        base = _card(name, created, root=given, parent=None, max_model_len=context)
        adapters = [_card(a.name, a.loaded_at, root=a.path, parent=name) for a in registry.adapters()]
        return [base, *adapters]

    def route(model_id: str) -> Route:
        if model_id == name:
            return BASE_SLOT, None
        if model_id in registry:
            return None, model_id
        raise _not_found(model_id, [name, *(a.name for a in registry.adapters())])

    return Served(engine, tokenizer, context, cards, route, registry)


def _context(model: Any, config: ServeConfig) -> int:
    return config.max_context or int(getattr(model.config, "max_position_embeddings", 2048))
