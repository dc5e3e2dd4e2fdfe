"""LoRA adapters served by name on a base model: loaded at start or at run time, checked first.

Every adapter, whoever loads it, must be a PEFT LoRA folder with `adapter_config.json` and
`adapter_model.safetensors` (a folder with only pickled `adapter_model.bin` weights is refused and
never unpickled), plain LoRA (`lora_weights.read_adapter_config`), a rank of at most the server's
maximum, on linear layers of the served model with its feature counts, and trained on the served
model: the base model its `artifact.json` (`base_model`) and `adapter_config.json`
(`base_model_name_or_path`) name, when they name one, must be the served model (the same name or
hub id, the same folder, or a folder of the same name).

Loading at run time (`load(..., from_client=True)`) is off unless the server has roots: the folder,
after resolving symlinks and the current directory, and each file read from it must lie under one
of them, and a path with a `..` part is refused outright. Each file is checked through the handle
it is then read from (its path as the kernel opened it, `/proc/self/fd`), so swapping a file for a
symlink after the check reads nothing from outside the roots; a file that is not a regular file
(a pipe, a device) is refused unread.

Loading a name that is loaded replaces its adapter in the same slot; requests started before keep
the old weights to their end, requests that start after use the new ones. A refusal leaves the
served adapters as they were. Refusals are `RequestError`s: 403 (loading off, a path outside the
roots), 400 (a folder that is not a usable adapter, every slot taken), 404 (unloading an unknown
name).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from tracegym.errors import UserError
from tracegym.moe_router.chat_api import RequestError
from tracegym.moe_router.folder import ARTIFACT_FILE
from tracegym.moe_router.lora_slots import LoraSlots
from tracegym.moe_router.lora_weights import CONFIG_FILE, WEIGHTS_FILE, AdapterWeights, read_adapter

PICKLED_WEIGHTS = "adapter_model.bin"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}")  # fullmatch: no trailing newline either


@dataclass(frozen=True)
class LoadedAdapter:
    """An adapter being served: its `name`, the `path` it was loaded from (as given), its `slot`
    and when that name was first loaded (Unix seconds; a reload keeps it)."""

    name: str
    path: str
    slot: int
    loaded_at: int


class BaseIdentity:
    """The names the served model goes by, to compare with the base model an adapter names."""

    def __init__(self, given: str, model: nn.Module) -> None:
        """`given`: the model as the command named it (`tiny`, `smollm2-135m`, a folder, a hub id)."""
        self.given = given
        found = {given, str(getattr(model.config, "_name_or_path", "") or "")}
        if given != "tiny":
            from tracegym.models import resolve_model_path

            found.add(resolve_model_path(given))
        self.names = {key for name in found if name for key in _keys(name)}

    def accepts(self, claim: str) -> bool:
        """Whether an adapter trained on `claim` (a name, hub id or folder) was trained on this model."""
        return bool(_keys(claim) & self.names)


def _keys(name: str) -> set[str]:
    """What `name` is compared by: itself, its real path when it is a folder, its last part."""
    keys = {name.lower(), Path(name.rstrip("/")).name.lower()}
    path = Path(name).expanduser()
    if path.is_dir():
        keys.add(str(path.resolve()).lower())
    return {key for key in keys if key}


class LoraRegistry:
    """The adapters served on one base model, by name, in the slots of `slots`.

    `roots`: folders runtime loads may read from (empty: runtime loading off). `exclusive`: a
    context that holds the model while slot weights change (`Engine.exclusive`; set once the
    engine exists)."""

    def __init__(self, slots: LoraSlots, identity: BaseIdentity, base_name: str, roots: Sequence[str | Path]) -> None:
        self.slots, self.identity, self.base_name = slots, identity, base_name
        self.roots = [_root(root) for root in roots]
        self.exclusive: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
        self._adapters: dict[str, LoadedAdapter] = {}
        self._lock = threading.Lock()  # one load or unload at a time

    @property
    def runtime_loading(self) -> bool:
        return bool(self.roots)

    def adapters(self) -> list[LoadedAdapter]:
        """The served adapters, in the order they were first loaded."""
        return list(self._adapters.values())

    def __contains__(self, name: object) -> bool:
        return name in self._adapters

    def slot_of(self, name: str) -> int:
        """The slot of adapter `name`; KeyError when it is not loaded."""
        return self._adapters[name].slot

    def load(self, name: str, path: str, *, from_client: bool = False) -> LoadedAdapter:
        """Serve the adapter folder `path` as `name` (replacing an adapter of that name).
        `from_client`: a runtime request, held to the roots. Raises RequestError."""
        if from_client:
            self._check_runtime()
        self._check_name(name)
        with self._lock:
            folder = self._folder(path, from_client)
            weights = self._read(folder, name, self._files(folder, path, from_client))
            slot = self._slot_for(name)
            with self.exclusive():
                self.slots.write(slot, weights)
                previous = self._adapters.get(name)
                loaded_at = int(time.time()) if previous is None else previous.loaded_at
                self._adapters[name] = LoadedAdapter(name, path, slot, loaded_at)
            return self._adapters[name]

    def unload(self, name: str) -> None:
        """Stop serving `name` (a runtime request: needs runtime loading on). Raises RequestError."""
        self._check_runtime()
        with self._lock:
            if name not in self._adapters:
                raise RequestError(404, f"The lora adapter '{name}' cannot be found.", "lora_not_found")
            with self.exclusive():
                self.slots.clear(self._adapters.pop(name).slot)

    # -- checks -------------------------------------------------------------------------------

    def _check_runtime(self) -> None:
        if not self.runtime_loading:
            raise RequestError(
                403,
                "loading and unloading LoRA adapters at run time is off: start the server with "
                "--lora-root DIR to allow adapters from under DIR",
                "lora_runtime_loading_off",
            )

    def _check_name(self, name: str) -> None:
        if not _NAME.fullmatch(name or ""):
            raise RequestError(
                400,
                f"lora_name {name!r}: 1 to 128 characters, letters, digits and . _ : / @ + -, starting "
                "with a letter or digit",
                "invalid_lora_name",
            )
        if name == self.base_name:
            raise RequestError(400, f"lora_name '{name}' is the base model's name", "invalid_lora_name")

    def _folder(self, path: str, from_client: bool) -> Path:
        """The adapter folder `path` names, resolved; for a client, under the roots (403 if not)."""
        if not path or "\x00" in path:
            raise RequestError(400, "lora_path must name an adapter folder (no NUL characters)", "invalid_lora_path")
        raw = Path(path) if from_client else Path(path).expanduser()
        if from_client and ".." in raw.parts:
            raise RequestError(
                403, f"lora_path '{path}' has a '..' part; give the folder's own path", "lora_path_forbidden"
            )
        folder = Path(os.path.realpath(raw))
        if from_client:
            files = [folder / name for name in (CONFIG_FILE, WEIGHTS_FILE, ARTIFACT_FILE)]
            reals = [folder, *(Path(os.path.realpath(file)) for file in files if os.path.lexists(file))]
            if not all(self._under_roots(real) for real in reals):
                raise _outside_roots(path)
        if not folder.is_dir():
            raise RequestError(400, f"lora_path '{path}': no such adapter folder", "invalid_lora_path")
        return folder

    def _under_roots(self, real: Path) -> bool:
        return any(real == root or real.is_relative_to(root) for root in self.roots)

    def _files(self, folder: Path, path: str, from_client: bool) -> dict[str, bytes]:
        """The contents of the folder's adapter files that exist, by name; for a client, each read
        through a handle checked to be a regular file under the roots (403 if outside, 400 if not
        a regular file)."""
        files = {}
        for name in (CONFIG_FILE, WEIGHTS_FILE, ARTIFACT_FILE):
            try:
                handle = os.open(folder / name, os.O_RDONLY | os.O_NONBLOCK)
            except FileNotFoundError:
                continue
            except OSError as error:
                raise RequestError(
                    400, f"{folder / name}: cannot open: {error.strerror}", "invalid_lora_adapter"
                ) from None
            with os.fdopen(handle, "rb") as file:
                if from_client and not self._under_roots(_opened_path(handle, folder / name)):
                    raise _outside_roots(path)
                if not stat.S_ISREG(os.fstat(handle).st_mode):
                    raise RequestError(400, f"{folder / name}: not a regular file", "invalid_lora_adapter")
                files[name] = file.read()
        return files

    def _read(self, folder: Path, name: str, files: dict[str, bytes]) -> AdapterWeights:
        """The folder's LoRA from its `files`, checked against the served model (400 with every
        reason if it does not fit)."""
        if WEIGHTS_FILE not in files:
            if (folder / PICKLED_WEIGHTS).exists():
                raise RequestError(
                    400,
                    f"{folder}: only pickled weights ({PICKLED_WEIGHTS}), which this server never loads: save the "
                    f"adapter as safetensors ({WEIGHTS_FILE}, PEFT's default)",
                    "invalid_lora_adapter",
                )
            raise RequestError(400, f"{folder}: no {WEIGHTS_FILE}: not a PEFT LoRA folder", "invalid_lora_adapter")
        try:
            weights = read_adapter(folder, name, files)
            claims = _base_claims(folder, files)
        except UserError as error:
            raise RequestError(400, str(error), "invalid_lora_adapter") from None
        wrong = [claim for claim in claims if not self.identity.accepts(claim)]
        if wrong:
            raise RequestError(
                400,
                f"{folder}: trained on base model '{wrong[0]}', but this server serves '{self.identity.given}'",
                "lora_base_model_mismatch",
            )
        problems = self.slots.problems(weights)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise RequestError(400, f"{folder}: {problems[0]}{more}", "invalid_lora_adapter")
        return weights

    def _slot_for(self, name: str) -> int:
        """`name`'s slot, else the first free one (400 when every slot holds an adapter)."""
        if name in self._adapters:
            return self._adapters[name].slot
        taken = {adapter.slot for adapter in self._adapters.values()}
        free = [slot for slot in range(1, self.slots.count + 1) if slot not in taken]
        if not free:
            raise RequestError(
                400,
                f"all {self.slots.count} adapter slots are taken ({', '.join(self._adapters)}): unload one, or "
                "start the server with a larger --max-loras",
                "lora_slots_full",
            )
        return free[0]


def _root(root: str | Path) -> Path:
    real = Path(os.path.realpath(Path(root).expanduser()))
    if not real.is_dir():
        raise UserError(f"--lora-root {root}: no such folder")
    return real


def _outside_roots(path: str) -> RequestError:
    """The refusal of a client's `path` that leads outside the roots (403)."""
    return RequestError(
        403,
        f"lora_path '{path}' leads outside the folders this server may load adapters from (--lora-root), "
        "following symlinks",
        "lora_path_forbidden",
    )


def _opened_path(handle: int, path: Path) -> Path:
    """The real path of the file open as `handle`, from the kernel (`/proc/self/fd`) where it tells;
    elsewhere `path` resolved, which a swap between the check and the read could change."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{handle}"))
    except OSError:
        return Path(os.path.realpath(path))


def _base_claims(folder: Path, files: dict[str, bytes]) -> list[str]:
    """The base models the folder's `files` say its adapter was trained on (artifact.json,
    adapter_config.json)."""
    claims = []
    for file, key in ((ARTIFACT_FILE, "base_model"), (CONFIG_FILE, "base_model_name_or_path")):
        if file not in files:
            continue
        path = folder / file
        try:
            value = json.loads(files[file]).get(key)
        except (ValueError, AttributeError) as error:
            raise UserError(f"{path}: cannot read: {error}") from None
        if isinstance(value, str) and value:
            claims.append(value)
    return claims
