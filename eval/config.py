"""The eval stage's configs: `RunConfig`, what `tracegym run` does (`SynthConfig` and `TrainConfig`
for every adapter, plus the inputs and how many capabilities to train), and `EvaluateConfig`,
what `tracegym eval` does. Light (no torch): the CLI builds its flags from them."""

from __future__ import annotations

from dataclasses import dataclass

from tracegym.adapters.config import EvalConfig, TrainConfig
from tracegym.config import PolicyConfig, option
from tracegym.synth_envs.synthesise import SynthConfig


@dataclass
class RunConfig(TrainConfig, SynthConfig):
    """The main job: ingest, diagnose, synthesise, and train one adapter per selected capability.

    The defaults are the library's (hours on 2 CPU cores); `configs/demo.toml` sizes a CPU demo.
    """

    inputs: list[str] = option(help="agent run files or folders; empty: an example run the project writes itself",
                               factory=list, flag=False)
    max_adapters: int = option(1, "capabilities trained, in order of mean Δ (the rest are listed, not trained)")


@dataclass
class EvaluateConfig(PolicyConfig):
    """What `tracegym eval` does: score each policy greedily and sampled on the same held-out seeds."""

    eval: EvalConfig = option(help="held-out evaluation", factory=EvalConfig)
