"""The adapters stage's configs: turn credit, GRPO, the SFT warm start, held-out evaluation, and
`TrainConfig`, what `tracegym train` resolves (and `tracegym run` extends).

Light on purpose (no torch): the CLI builds its flags from these classes for `--help`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tracegym.config import PolicyConfig, ServedRolloutConfig, check_choice, option
from tracegym.schema import CreditKind
from tracegym.synth_envs.calibration import CalibrationConfig


@dataclass
class CreditConfig:
    """Turn credit (docs/method.md, "Turn credit"); the defaults are the method's."""

    flag_prefix: ClassVar[str] = "credit"
    credit: CreditKind = option(
        "trace", "trace: TRACE turn credit plus the outcome advantage; grpo: the outcome advantage on every token"
    )
    eps: float = option(0.1, "ε added to the gap -ℓ_k so values stay finite (nats)")
    K: int = option(3, "backup horizon in actions")
    gamma: float = option(0.8, "discount γ inside the backup and the terminal fill")
    lambda_term: float = option(2.0, "λ_term, weight of the outcome advantage filled into the last K actions")
    alpha_out: float = option(1.0, "α_out, weight of the outcome advantage on every policy token")
    alpha_turn: float = option(0.2, "α_turn, weight of the turn reward r_k on the tokens of action k")

    def __post_init__(self) -> None:
        check_choice("credit", self.credit, CreditKind)
        if self.eps <= 0 or self.K < 1 or not 0 < self.gamma <= 1:
            raise ValueError(f"need eps > 0, K >= 1, 0 < gamma <= 1; got {self.eps}, {self.K}, {self.gamma}")


@dataclass
class TurnGRPOConfig:
    """GRPO on LoRA weights (docs/method.md, "GRPO"), scaled to one CPU; no KL term.

    A step draws `groups_per_step` groups of `group_size` rollouts and averages their gradient.
    The defaults of `learning_rate` (1e-4) and `steps` (6) come from a sweep on the embedded model
    (docs/engineering.md, "adapters"). Raises ValueError for a `hint_fraction` outside [0, 1],
    `mini_batches` < 1 or `max_redraws` < 0.
    """

    flag_prefix: ClassVar[str] = "grpo"
    learning_rate: float = option(1e-4, "AdamW learning rate of the LoRA weights")
    weight_decay: float = option(0.0, "AdamW weight decay")
    steps: int = option(6, "training steps; a step is one batch of rollouts and its updates")
    groups_per_step: int = option(4, "seeds (GRPO groups) per step (the paper uses 64)")
    group_size: int = option(8, "rollouts per seed")
    mini_batches: int = option(
        1,
        "optimizer steps per batch of rollouts, each on whole groups (at most one per "
        "trained group; > 1 makes clipping act and costs a forward pass for the old log-probs)",
    )
    max_redraws: int = option(
        2,
        "extra rollout rounds a step may draw to replace flat groups (all rewards equal) with groups of fresh "
        "training seeds; 0: flat groups are only dropped",
    )
    micro_batch_size: int = option(
        8,
        "episodes of one group per forward/backward pass (memory only: the group's prompt is encoded and "
        "backpropagated once whatever the split)",
    )
    epsilon_low: float = option(0.2, "lower ratio clip: 1 - epsilon_low")
    epsilon_high: float = option(0.28, "upper ratio clip: 1 + epsilon_high (DAPO-style asymmetric)")
    hint_fraction: float = option(
        0.25, "share of each group's rollouts with the environment's hint (removed before the update)"
    )
    max_grad_norm: float = option(1.0, "gradient clipping norm")
    bf16: bool = option(
        False,
        "bfloat16 autocast in the update's forward passes (weights, LoRA, optimizer and log-softmax stay "
        "float32; rollouts and reference scoring are untouched); float32 with a warning where the device has "
        "no native bfloat16 (tracegym.precision)",
    )
    lora_rank: int = option(16, "rank of a fresh LoRA (ignored when starting from an adapter)")
    seed: int = option(0, "seeds the LoRA init, the order of training seeds and the sampling")
    save_every: int = option(5, "checkpoint every this many steps (the last step is always saved)")
    credit: CreditConfig = option(help="turn credit", factory=CreditConfig)
    served: ServedRolloutConfig = option(
        help="rollouts from an OpenAI-compatible server (off: in-process)", factory=ServedRolloutConfig
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.hint_fraction <= 1.0:
            raise ValueError(f"hint_fraction must be in [0, 1], got {self.hint_fraction}")
        if self.mini_batches < 1 or self.max_redraws < 0:
            raise ValueError(
                f"need mini_batches >= 1 and max_redraws >= 0, got {self.mini_batches}, {self.max_redraws}"
            )


@dataclass
class WarmStartConfig:
    """SFT on oracle dialogues before GRPO, for policies that cannot call tools yet."""

    flag_prefix: ClassVar[str] = "warm_start"
    enabled: bool = option(False, "SFT on oracle dialogues first (the embedded SmolLM2-135M needs it)")
    dialogues: int = option(400, "oracle dialogues to train on, from consecutive training seeds")
    steps: int = option(20, "optimizer steps")
    batch_size: int = option(8, "dialogues per step")
    learning_rate: float = option(1e-3, "AdamW learning rate")
    lora_rank: int = option(16, "LoRA rank")
    max_length: int = option(1024, "dialogues are truncated to this many tokens")
    gradient_checkpointing: bool = option(
        False, "recompute activations in the backward pass: less memory, more time (dialogues of thousands of tokens)"
    )
    bf16: bool = option(
        False,
        "bfloat16 autocast (weights and LoRA stay float32); float32 with a warning where the device has "
        "no native bfloat16 (tracegym.precision)",
    )
    detach_prompt: bool = option(
        False,
        "encode each batch's prompt (the tokens before the first assistant turn: system prompt, first user "
        "message) without gradient and train on the rest over its cache: the same loss, whose gradient "
        "loses only the path through the prompt's keys and values; needs gradient_checkpointing off",
    )
    seed: int = option(0, "data order and LoRA init seed")
    save_every: int = option(
        0,
        "optimizer steps between resumable checkpoints in the output folder's checkpoints/ (the latest kept; "
        "an interrupted warm start resumes from it); 0: none",
    )

    def __post_init__(self) -> None:
        if self.save_every < 0:
            raise ValueError(f"save_every must be at least 0, got {self.save_every}")
        if self.detach_prompt and self.gradient_checkpointing:
            raise ValueError(
                "detach_prompt needs gradient_checkpointing off (a checkpointed layer drops the prompt's cache)"
            )


@dataclass
class EvalConfig:
    """Held-out evaluation on the environment's evaluation seeds, unhinted."""

    flag_prefix: ClassVar[str] = "eval"
    seeds: int = option(64, "held-out seeds scored before and after training (0: skip)")
    sampled: int = option(4, "sampled rollouts per held-out seed, at the rollout temperature (0: greedy only)")
    greedy: bool = option(
        True,
        "one greedy episode per held-out seed as well (off: sampled only, e.g. at a rung "
        "the policy already solves greedily)",
    )

    def __post_init__(self) -> None:
        if self.seeds and not (self.greedy or self.sampled):
            raise ValueError("eval: greedy is off and sampled is 0, so held-out seeds would score nothing")


@dataclass
class TrainConfig(PolicyConfig):
    """What `tracegym train` does: warm start, calibration, GRPO and held-out evaluation."""

    calibration: CalibrationConfig = option(help="calibration", factory=CalibrationConfig)
    warm_start: WarmStartConfig = option(help="SFT warm start", factory=WarmStartConfig)
    grpo: TurnGRPOConfig = option(help="GRPO", factory=TurnGRPOConfig)
    eval: EvalConfig = option(help="held-out evaluation", factory=EvalConfig)
