"""The folder `tracegym route` writes, and `load_policy`, which `tracegym serve` and evaluation load.

    router.json            RouterManifest: base model, adapters (folder, capability, family,
                           description, sha256 of each file), top_k, compute, training config
    router.safetensors     gate weight (layers, slots, hidden) and bias (layers, slots)
    metrics.json           held-out routing accuracy of the token router and the task router
    adapters/<name>/       copies of each adapter folder (adapter_config.json,
                           adapter_model.safetensors, artifact.json), checked against their hashes

`load_policy(folder, route)` returns `(model, tokenizer)`: a transformers causal LM (the mixture
built in place) that `generate` and `tracegym.generation.HFBackend` drive like any model, batched
and with the KV cache. `route`: "token" (the trained gates), "task" (the paper's v1 task router),
"base", or an adapter name (that adapter alone).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PreTrainedTokenizerBase

from tracegym.errors import UserError
from tracegym.files import sha256_file, write_text_atomic
from tracegym.moe_router.lora_weights import CONFIG_FILE, WEIGHTS_FILE, read_adapter
from tracegym.moe_router.mixture import MixtureRouter, attach_mixture
from tracegym.moe_router.task_router import TaskRouter, enable_task_routing
from tracegym.schema import AdapterArtifact

FORMAT = "tracegym-router/1"
MANIFEST_FILE = "router.json"
GATES_FILE = "router.safetensors"
METRICS_FILE = "metrics.json"
ADAPTERS_DIR = "adapters"
ARTIFACT_FILE = "artifact.json"
ADAPTER_FILES = (CONFIG_FILE, WEIGHTS_FILE, ARTIFACT_FILE)
ROUTES = ("token", "task", "base")


class AdapterEntry(BaseModel):
    """One adapter of a routed folder; `folder` is relative to the routed folder."""

    name: str
    capability: str
    family: str
    description: str
    folder: str
    sha256: dict[str, str]


class RouterManifest(BaseModel):
    """router.json."""

    format: Literal["tracegym-router/1"] = FORMAT
    base_model: str
    adapters: list[AdapterEntry]
    top_k: int
    compute: Literal["auto", "stacked", "gather"]
    layers: int
    hidden_size: int
    training: dict[str, Any]


def read_artifact(folder: Path) -> AdapterArtifact:
    """The `artifact.json` that `tracegym train` leaves beside the adapter."""
    path = folder / ARTIFACT_FILE
    try:
        return AdapterArtifact.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UserError(
            f"{path}: cannot read ({error.strerror or error}); the router needs the environment each "
            "adapter was trained on, which `tracegym train` records there"
        ) from None
    except ValidationError as error:
        first = error.errors()[0]
        raise UserError(f"{path}: not an AdapterArtifact: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def adapter_name(capability: str) -> str:
    """A capability name as a folder and model-id safe adapter name."""
    name = re.sub(r"[^a-z0-9_-]+", "_", capability.lower()).strip("_")
    if not name or name in ROUTES:
        raise UserError(f"capability {capability!r} does not make a usable adapter name")
    return name


def write_routed_folder(
    out: Path,
    sources: list[Path],
    entries: list[AdapterEntry],
    manifest_fields: dict[str, Any],
    router: MixtureRouter,
    metrics: dict[str, Any],
) -> RouterManifest:
    """Write the folder at `out` (built beside it, then renamed into place): adapter copies from
    `sources` (entry i's folder), gates, manifest and metrics."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for source, entry in zip(sources, entries):
        target = partial / entry.folder
        target.mkdir(parents=True)
        for name in ADAPTER_FILES:
            shutil.copyfile(source / name, target / name)
            entry.sha256[name] = sha256_file(target / name)
    save_file(
        {
            "gate_weight": router.gate_weight.detach().cpu().contiguous(),
            "gate_bias": router.gate_bias.detach().cpu().contiguous(),
        },
        str(partial / GATES_FILE),
    )
    manifest = RouterManifest(adapters=entries, **manifest_fields)
    write_text_atomic(partial / MANIFEST_FILE, manifest.model_dump_json(indent=2))
    write_text_atomic(partial / METRICS_FILE, json.dumps(metrics, indent=2))
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    return manifest


def read_manifest(folder: str | Path) -> RouterManifest:
    """router.json of a routed folder, with every adapter file checked against its hash."""
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    try:
        manifest = RouterManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UserError(
            f"{path}: cannot read ({error.strerror or error}); is {folder} a folder `tracegym route` wrote?"
        ) from None
    except ValidationError as error:
        first = error.errors()[0]
        raise UserError(f"{path}: not a router manifest: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    if not manifest.adapters or not 1 <= manifest.top_k <= len(manifest.adapters) + 1:
        raise UserError(
            f"{path}: needs at least one adapter and top_k in [1, adapters + 1], got top_k={manifest.top_k}"
        )
    for entry in manifest.adapters:
        if set(entry.sha256) != set(ADAPTER_FILES):
            raise UserError(f"{path}: adapter '{entry.name}' must record the sha256 of {', '.join(ADAPTER_FILES)}")
        for name, digest in entry.sha256.items():
            file = folder / entry.folder / name
            if not file.resolve().is_relative_to(folder.resolve()) or not file.is_file():
                raise UserError(f"{path}: adapter '{entry.name}': {file} is missing")
            if sha256_file(file) != digest:
                raise UserError(f"{file}: content differs from the sha256 recorded in {path} (modified or corrupted)")
    return manifest


def load_mixture(
    folder: str | Path, device: str | None = None
) -> tuple[nn.Module, PreTrainedTokenizerBase, MixtureRouter, RouterManifest]:
    """The base model with the folder's adapters and trained gates attached, its tokenizer, the
    router and the manifest."""
    from tracegym.adapters.train import load_base

    folder = Path(folder)
    manifest = read_manifest(folder)
    model, tokenizer = load_base(manifest.base_model)
    adapters = [read_adapter(folder / entry.folder, entry.name) for entry in manifest.adapters]
    router = attach_mixture(model, adapters, manifest.top_k, manifest.compute)
    gates_path = folder / GATES_FILE
    try:
        gates = load_file(str(gates_path))
    except (OSError, SafetensorError) as error:
        raise UserError(f"{gates_path}: cannot read gates: {error}") from None
    for name in ("gate_weight", "gate_bias"):
        expected = getattr(router, name)
        if name not in gates or gates[name].shape != expected.shape:
            found = tuple(gates[name].shape) if name in gates else "missing"
            raise UserError(f"{gates_path}: {name} is {found}, the mixture needs {tuple(expected.shape)}")
        expected.data.copy_(gates[name])
    if device:
        model.to(device)
    model.eval()
    return model, tokenizer, router, manifest


def task_router_for(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, router: MixtureRouter, manifest: RouterManifest
) -> TaskRouter:
    """The v1 task router over the manifest's adapters (capability names and family descriptions)."""
    return TaskRouter(model, tokenizer, router, [(entry.capability, entry.description) for entry in manifest.adapters])


def load_policy(
    folder: str | Path, route: str = "token", device: str | None = None
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    """A routed folder as `(model, tokenizer)`; `route` is "token", "task", "base" or an adapter name.

    "task" routes each batch row by its first user message when the row's first forward pass
    holds it (transformers' `generate`); tracegym's rollout engine shares prompt caches across
    rows, so held-out evaluation routes each task once and reuses the chosen arm's episode instead
    (`eval.arms.task_routed_records`).
    """
    model, tokenizer, router, manifest = load_mixture(folder, device)
    if route == "task":
        enable_task_routing(model, tokenizer, task_router_for(model, tokenizer, router, manifest))
    elif route != "token":
        try:
            router.forced_slot = router.slot_of(route)
        except KeyError as error:
            raise UserError(
                f"{folder}: {error.args[0]}; routes: {', '.join([*ROUTES, *router.adapter_names])}"
            ) from None
    return model, tokenizer
