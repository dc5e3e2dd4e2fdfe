"""`RunConfig`: what `tracegym run` does — `SynthConfig` and `TrainConfig` for every adapter, plus
the inputs and how many capabilities to train. Light (no torch): the CLI builds its flags from it."""

from __future__ import annotations

from dataclasses import dataclass

from tracegym.adapters.config import TrainConfig
from tracegym.config import option
from tracegym.synth_envs.synthesise import SynthConfig


@dataclass
class RunConfig(TrainConfig, SynthConfig):
    """The main job: ingest, diagnose, synthesise, and train one adapter per selected capability.

    The defaults are the library's (hours on 2 CPU cores); `configs/demo.toml` sizes a CPU demo.
    """

    inputs: list[str] = option(help="agent run files or folders; empty: an example run the project writes itself",
                               factory=list, flag=False)
    max_adapters: int = option(1, "capabilities trained, in order of mean Δ (the rest are listed, not trained)")
