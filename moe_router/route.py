"""`tracegym route`'s work: adapters in, a routed folder out (see `folder.py` for its layout).

Reads each adapter's artifact.json (capability, base model, environment), builds the mixture on
the base model, trains the token router (router_training.py) and measures both routers on the
same held-out dialogues: the token router per token and layer, the task router per dialogue.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracegym.config import config_dict
from tracegym.errors import UserError
from tracegym.moe_router.config import RouterTrainingConfig
from tracegym.moe_router.folder import (
    MANIFEST_FILE,
    AdapterEntry,
    RouterManifest,
    adapter_name,
    read_artifact,
    task_router_for,
    write_routed_folder,
)
from tracegym.moe_router.lora_weights import read_adapter
from tracegym.moe_router.mixture import Compute, attach_mixture
from tracegym.moe_router.router_data import DomainText, LabelledDialogue, router_data
from tracegym.moe_router.router_training import train_router
from tracegym.moe_router.task_router import TaskRouter
from tracegym.synth_envs.registry import get_family

logger = logging.getLogger(__name__)


def task_router_accuracy(
    task_router: TaskRouter, dialogues: Sequence[LabelledDialogue], names: Sequence[str]
) -> dict[str, Any]:
    """Share of `dialogues` whose task the task router sends to the dialogue's slot, overall and per
    family, and how often each slot was chosen."""
    chosen = task_router.choose([d.task for d in dialogues])
    per_family: dict[str, list[bool]] = {}
    for dialogue, slot in zip(dialogues, chosen):
        per_family.setdefault(dialogue.family, []).append(slot == dialogue.slot)
    hits = [hit for values in per_family.values() for hit in values]
    labels = ["base", *names]
    return {
        "accuracy": round(sum(hits) / len(hits), 4),
        "per_family": {family: round(sum(v) / len(v), 4) for family, v in per_family.items()},
        "chosen": {labels[slot]: count for slot, count in sorted(Counter(chosen).items())},
        "tasks": len(hits),
    }


def build_router(
    adapter_dirs: Sequence[Path],
    out: Path,
    config: RouterTrainingConfig,
    model_name: str | None = None,
    compute: Compute = "auto",
    overwrite: bool = False,
    domain: DomainText | None = None,
) -> tuple[RouterManifest, dict[str, Any]]:
    """Train a router over the adapters in `adapter_dirs` and write the routed folder `out`; with
    `domain`, the agent's own domain is in the base text (`router_data`)."""
    from tracegym.adapters.train import load_base

    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(f"{out}: exists and is not empty (pass --overwrite to replace it)")
    for folder in adapter_dirs:
        if not folder.is_dir():
            raise UserError(f"{folder}: no such adapter folder")
    artifacts = [read_artifact(folder) for folder in adapter_dirs]
    names = [adapter_name(a.capability) for a in artifacts]
    if len(set(names)) != len(names):
        raise UserError(f"two adapters for the same capability: {', '.join(names)}")
    bases = {a.base_model for a in artifacts}
    if model_name is None and len(bases) != 1:
        raise UserError(
            f"the adapters were trained on different base models ({', '.join(sorted(bases))}); pass --model"
        )
    base_model = model_name or bases.pop()
    families = []
    for folder, artifact in zip(adapter_dirs, artifacts):
        try:
            families.append(get_family(artifact.env_spec.family))
        except KeyError as error:
            raise UserError(f"{folder / 'artifact.json'}: {error.args[0]}") from None
    model, tokenizer = load_base(base_model)
    router = attach_mixture(model, [read_adapter(f, n) for f, n in zip(adapter_dirs, names)], config.top_k, compute)
    logger.info("router data: %d adapters, %d dialogues each", len(names), config.train_dialogues)
    data = router_data(
        tokenizer,
        [a.env_spec for a in artifacts],
        config.train_dialogues,
        config.heldout_dialogues,
        config.max_tokens,
        assistant_only=config.labels == "assistant",
        domain=domain,
    )
    metrics = {"token_router": train_router(model, router, data, config)}
    entries = [
        AdapterEntry(
            name=name,
            capability=artifact.capability,
            family=family.name,
            description=family.description,
            folder=f"adapters/{name}",
            sha256={},
        )
        for name, artifact, family in zip(names, artifacts, families)
    ]
    fields = {
        "base_model": base_model,
        "top_k": config.top_k,
        "compute": compute,
        "layers": len(router.states),
        "hidden_size": router.gate_weight.shape[-1],
        "training": {
            "config": config_dict(config),
            "adapters": [str(p) for p in adapter_dirs],
            "domain": data.domain,
        },
    }
    task_router = task_router_for(model, tokenizer, router, RouterManifest(adapters=entries, **fields))
    tasks = list({(d.family, d.seed): d for d in data.heldout}.values())
    metrics["task_router"] = task_router_accuracy(task_router, tasks, names)
    manifest = write_routed_folder(out, list(adapter_dirs), entries, fields, router, metrics)
    logger.info("wrote %s", out / MANIFEST_FILE)
    return manifest, metrics
