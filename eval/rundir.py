"""A resumable run directory: `run.json` plus one folder per stage.

`run.json` records what ran (command, config, package versions) and, per stage, the relative
path and sha256 of every artifact it wrote. A stage whose artifacts are all present with the
recorded hashes is skipped on rerun; any other stage runs again in its own folder, where it may
resume from what an interrupted attempt left (training checkpoints, for instance).
"""

from __future__ import annotations

import json
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable

from tracegym.files import sha256_file, write_text_atomic

_VERSIONED = ("tracegym", "torch", "transformers", "peft", "trl", "datasets")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


class RunDirectoryError(ValueError):
    """The directory holds a run made with another config."""


class RunDirectory:
    """Stage bookkeeping for one run; `config` is stored and must match on resume."""

    def __init__(self, root: str | Path, config: dict[str, Any]) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.manifest_path = self.root / "run.json"
        if self.manifest_path.exists():
            self.manifest = json.loads(self.manifest_path.read_text())
            if self.manifest.get("config") != config:
                raise RunDirectoryError(
                    f"{self.manifest_path}: this run directory was made with another config "
                    f"({self.manifest.get('config')}); use a new --out directory"
                )
        else:
            self.manifest = {
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "command": sys.argv,
                "config": config,
                "versions": package_versions(),
                "stages": {},
            }
            self._save()

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
        self.manifest["stages"][stage] = {"status": "running", "started": time.time()}
        self._save()
        started = time.time()
        artifacts = [Path(p) for p in work(self.stage_dir(stage))]
        self.manifest["stages"][stage] = {
            "status": "complete",
            "seconds": round(time.time() - started, 2),
            "artifacts": {str(p.relative_to(self.root)): sha256_file(p) for p in artifacts},
        }
        self._save()
        return True

    def _save(self) -> None:
        write_text_atomic(self.manifest_path, json.dumps(self.manifest, indent=2))
