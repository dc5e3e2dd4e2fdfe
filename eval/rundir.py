"""A resumable run directory: `run.json` plus one folder per stage.

`run.json` records what ran (command, config, package versions), the sha256 of every input
(a folder's: of its files' relative paths and contents), and, per stage, the relative path and
sha256 of every artifact it wrote. A stage whose artifacts are all present with the recorded
hashes is skipped on rerun; any other stage runs again in its own folder, where it may resume
from what an interrupted attempt left (training checkpoints, for instance). When an input's
content changed since the run was made, every stage depends on it: the stage folders are removed
and all stages run again, and the run says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from tracegym.errors import UserError
from tracegym.files import sha256_file, write_text_atomic

logger = logging.getLogger(__name__)
_VERSIONED = ("tracegym", "torch", "transformers", "peft", "trl", "datasets")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def sha256_input(path: Path) -> str:
    """A file's sha256, or a folder's: over the sorted relative paths and contents of its files
    (links followed once by real path)."""
    if path.is_file():
        return sha256_file(path)
    digest = hashlib.sha256()
    seen: set[str] = set()
    for folder, dirs, files in os.walk(path, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            dirs.clear()
            continue
        seen.add(real)
        dirs.sort()
        for name in sorted(files):
            file = Path(folder) / name
            digest.update(str(file.relative_to(path)).encode() + b"\0" + sha256_file(file).encode())
    return digest.hexdigest()


class RunDirectoryError(UserError):
    """The directory holds a run made with another config, or a run.json that cannot be read."""


_MISSING = object()


def config_differences(stored: Any, current: Any, defaults: Any = _MISSING, key: str = "") -> list[str]:
    """`key: stored -> current` for each setting whose value differs between two config dicts. A
    setting the stored config lacks (added since that run was made) differs only when its current
    value is not its value in `defaults`. A stored config that is missing or not a table (a damaged
    run.json) is one difference saying so, not a dump of the current config."""
    if not key and isinstance(current, dict) and not isinstance(stored, dict):
        return ["the stored config is missing or unreadable"]
    if isinstance(stored, dict) and isinstance(current, dict):
        found = []
        for name in sorted(set(stored) | set(current)):
            path = f"{key}.{name}" if key else name
            default = defaults.get(name, _MISSING) if isinstance(defaults, dict) else _MISSING
            if name not in stored and default is not _MISSING and current[name] == default:
                continue
            found += config_differences(stored.get(name, _MISSING), current.get(name, _MISSING), default, path)
        return found
    if stored == current:
        return []

    def shown(value: Any) -> str:
        return "(absent)" if value is _MISSING else repr(value)

    return [f"{key}: {shown(stored)} -> {shown(current)}"]


class RunDirectory:
    """Stage bookkeeping for one run; `config` is stored and must match on resume (a setting added
    since, at its value in `defaults`, matches), `inputs` are hashed (a changed input reruns every
    stage)."""

    def __init__(
        self, root: str | Path, config: dict[str, Any], inputs: list[Path] = (), defaults: dict[str, Any] | None = None
    ) -> None:
        self.root = Path(root).resolve()
        self.manifest_path = self.root / "run.json"
        hashes = {str(path): sha256_input(path) for path in inputs}
        if self.manifest_path.exists():
            self.manifest = self._read()
            differences = config_differences(self.manifest.get("config"), config, defaults or {})
            if differences:
                raise RunDirectoryError(
                    f"{self.manifest_path}: this run directory was made with another config "
                    f"({'; '.join(differences)}); use a new --out directory"
                )
            changed = sorted(p for p, h in hashes.items() if self.manifest.get("inputs", {}).get(p) != h)
            if changed:
                logger.warning("input changed since this run was made: %s; rerunning every stage", ", ".join(changed))
                self._clear_stages()
                self.manifest["inputs"] = hashes
                self._save()
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            self.manifest = {
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "command": sys.argv,
                "config": config,
                "versions": package_versions(),
                "inputs": hashes,
                "stages": {},
            }
            self._save()

    def _read(self) -> dict[str, Any]:
        try:
            manifest = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise RunDirectoryError(
                f"{self.manifest_path}: not a readable run manifest ({error}); "
                f"use a new --out directory or remove the file"
            ) from None
        if not isinstance(manifest, dict) or not isinstance(manifest.get("stages"), dict):
            raise RunDirectoryError(
                f"{self.manifest_path}: not a run manifest (no 'stages' table); "
                f"use a new --out directory or remove the file"
            )
        if not isinstance(manifest.get("config"), dict):
            what = "missing" if "config" not in manifest else "not a table"
            raise RunDirectoryError(
                f"{self.manifest_path}: the config this run was made with is {what}, so it cannot be resumed; "
                f"use a new --out directory or remove the file"
            )
        return manifest

    def _clear_stages(self) -> None:
        """Remove every stage's folder and record: they were made from the old inputs."""
        for stage in self.manifest["stages"]:
            shutil.rmtree(self.root / stage, ignore_errors=True)
        self.manifest["stages"] = {}

    def stage_dir(self, stage: str) -> Path:
        path = self.root / stage
        path.mkdir(parents=True, exist_ok=True)
        return path

    def is_complete(self, stage: str) -> bool:
        record = self.manifest["stages"].get(stage)
        if not record or record.get("status") != "complete":
            return False
        for relative, digest in record["artifacts"].items():
            path = self.root / relative
            if not path.is_file() or sha256_file(path) != digest:
                return False
        return True

    def run_stage(self, stage: str, work: Callable[[Path], Iterable[Path]]) -> bool:
        """Run `work(stage_dir)` unless the stage is complete; returns True when it ran.

        `work` returns the artifact files it wrote; they are hashed into run.json.
        """
        if self.is_complete(stage):
            return False
        self.finish_stage(stage, work(self.start_stage(stage)))
        return True

    def start_stage(self, stage: str) -> Path:
        """Mark `stage` running and return its folder (for work done elsewhere, then `finish_stage`)."""
        self.manifest["stages"][stage] = {"status": "running", "started": time.time()}
        self._save()
        return self.stage_dir(stage)

    def finish_stage(self, stage: str, artifacts: Iterable[Path]) -> None:
        """Mark the started `stage` complete with the artifact files its work wrote (hashed)."""
        started = self.manifest["stages"][stage]["started"]
        self.manifest["stages"][stage] = {
            "status": "complete",
            "seconds": round(time.time() - started, 2),
            "artifacts": {str(Path(p).relative_to(self.root)): sha256_file(Path(p)) for p in artifacts},
        }
        self._save()

    def adopt_stage(self, donor: Path, stage: str) -> bool:
        """Copy `stage`, complete in the run directory `donor`, into this run (its folder and its
        record) unless it is complete here already; returns whether this run now holds it complete.
        The caller vouches that the stage's work would be the same here: the no-gap base agent of two
        planted-gap runs of one config, for instance."""
        if self.is_complete(stage):
            return True
        try:
            record = json.loads((Path(donor) / "run.json").read_text(encoding="utf-8"))["stages"][stage]
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if not isinstance(record, dict) or record.get("status") != "complete" or not (Path(donor) / stage).is_dir():
            return False
        shutil.rmtree(self.root / stage, ignore_errors=True)
        shutil.copytree(Path(donor) / stage, self.root / stage)
        self.manifest["stages"][stage] = record
        self._save()
        if self.is_complete(stage):
            return True
        del self.manifest["stages"][stage]  # the donor's files no longer match its record
        self._save()
        return False

    def record(self, key: str, value: Any) -> None:
        """Keep a setting resolved while running (e.g. each adapter's fitted turn budget) under
        run.json's `resolved`."""
        self.manifest.setdefault("resolved", {})[key] = value
        self._save()

    def _save(self) -> None:
        write_text_atomic(self.manifest_path, json.dumps(self.manifest, indent=2))
