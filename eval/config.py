"""The eval stage's configs: `RunConfig`, what `tracegym run` does, and `EvaluateConfig`, what
`tracegym eval` does. Light (no torch): the CLI builds its flags from them.

`tracegym run` on someone else's runs (PATH... given) ingests, diagnoses, synthesises and trains
one adapter per selected capability (`SynthConfig`, `TrainConfig`). Without runs it goes round the
whole loop on the target environment (`TargetConfig`): the base agent (`BaseAgentConfig`), its
train-split runs, diagnosis, environments, adapters trained from the base agent, the router
(`RouterTrainingConfig`), the held-out arms and the report (`LoopConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tracegym.adapters.config import EvalConfig, TrainConfig, WarmStartConfig
from tracegym.config import PolicyConfig, option
from tracegym.eval.target.config import TargetConfig
from tracegym.eval.target.kinds import GAP_CAPABILITIES
from tracegym.moe_router.config import RouterTrainingConfig
from tracegym.synth_envs.registry import CAPABILITY_TABLE
from tracegym.synth_envs.synthesise import SynthConfig

STOP_POINTS = ("trajectories", "analysis")  # stages `tracegym run --stop-after` may end a run at


@dataclass
class BaseAgentConfig(WarmStartConfig):
    """The base agent: `model` warm-started (LoRA SFT, merged) on oracle dialogues of the target's
    train split, short on purpose so it both solves and fails train tasks. Dialogues run
    2,300-5,000 tokens (a 2,100-token system prompt), so `max_length` must hold them. With `gap`
    set, the tasks whose kind exercises that capability show its planted mistake instead of the
    oracle (`tracegym.eval.target.planted`)."""

    flag_prefix: ClassVar[str] = "base_agent"
    enabled: bool = option(True, "warm-start the base agent (off: the base agent is --model as it is)")
    dialogues: int = option(14, "oracle dialogues of the first train-split seeds (at most --target-train-tasks)")
    steps: int = option(6, "optimizer steps")
    batch_size: int = option(2, "dialogues per step")
    max_length: int = option(6144, "dialogues are cut at this many tokens")
    gap: str = option(
        "",
        "a capability to plant as a gap: the dialogues of the task kinds exercising it show its characteristic "
        f"mistake instead of the oracle ({', '.join(GAP_CAPABILITIES)}; empty: none)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gap and self.gap not in GAP_CAPABILITIES:
            raise ValueError(f"gap must be empty or one of {', '.join(GAP_CAPABILITIES)}, got {self.gap!r}")


@dataclass
class LoopConfig:
    """The loop on the target: train-split rollouts, the plain-GRPO arm and the held-out evaluation."""

    flag_prefix: ClassVar[str] = "loop"
    train_trials: int = option(1, "sampled episodes of the base agent per train-split task (the runs diagnosed)")
    plain_grpo: bool = option(
        True, "train the plain-GRPO arm on the target's train split at the adapters' total rollouts"
    )
    fallback_capabilities: list[str] = option(
        help="capabilities trained when the diagnosis selects none, any a family trains whether or not the "
        "diagnosis labels it (the report marks them unselected)",
        factory=list,
    )
    eval_workers: int = option(
        1,
        "held-out arms played at once, each in a process of its own with an equal share of the cores; 1: one "
        "after another in this process",
    )
    rehearsal_dialogues: int = option(
        0,
        "the base agent's own first train-split demonstrations each adapter's warm start also trains on, so the "
        "adapter keeps the agent's behaviour on the target (0: none)",
    )

    def __post_init__(self) -> None:
        if self.train_trials < 1 or self.eval_workers < 1 or self.rehearsal_dialogues < 0:
            raise ValueError(
                f"train_trials and eval_workers must be at least 1 and rehearsal_dialogues at least 0, got "
                f"{self.train_trials}, {self.eval_workers} and {self.rehearsal_dialogues}"
            )
        trainable = sorted(name for name, row in CAPABILITY_TABLE.items() if row.family)
        untrainable = [name for name in self.fallback_capabilities if name not in trainable]
        if untrainable:
            raise ValueError(
                f"fallback_capabilities: no environment family trains {', '.join(untrainable)} "
                f"(trainable: {', '.join(trainable)})"
            )


@dataclass
class RunConfig(TrainConfig, SynthConfig):
    """The main job: the loop on the target environment, or diagnose-synth-train on given runs.

    The defaults are the library's; `configs/default.toml` sizes the loop for 2 CPU cores,
    `configs/quick.toml` (`--quick`) for a smoke run on the tiny model.
    """

    inputs: list[str] = option(
        help="agent run files or folders; empty: the loop on the target environment", factory=list, flag=False
    )
    max_adapters: int = option(1, "capabilities trained, in order of mean Δ (the rest are listed, not trained)")
    target: TargetConfig = option(help="the target environment", factory=TargetConfig)
    base_agent: BaseAgentConfig = option(help="the base agent", factory=BaseAgentConfig)
    router: RouterTrainingConfig = option(help="the token router over the adapters", factory=RouterTrainingConfig)
    loop: LoopConfig = option(help="the loop on the target", factory=LoopConfig)


@dataclass
class EvaluateConfig(PolicyConfig):
    """What `tracegym eval` does: score each policy greedily and sampled on the same held-out seeds."""

    eval: EvalConfig = option(help="held-out evaluation", factory=EvalConfig)
