"""`tracegym train ENV_SPEC --out DIR`: train one LoRA adapter for an environment.

ENV_SPEC is an EnvSpec JSON file (family + knobs + seed ranges, as `tracegym synth` writes) or a
family name (its default knobs). Exit codes: 0 trained, 1 bad input (unreadable spec, unknown
family, a checkpoint in DIR without --resume).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pydantic import ValidationError

from tracegym.adapters.grpo import GRPOConfig
from tracegym.adapters.sft import WarmStartConfig
from tracegym.errors import UserError
from tracegym.models import DEFAULT_MODEL
from tracegym.schema import EnvSpec


def load_env_spec(text: str) -> EnvSpec:
    """An EnvSpec from a JSON file path, or from a family name with default knobs."""
    from tracegym.synth_envs.registry import get_family

    path = Path(text)
    if path.suffix == ".json" or path.is_file():
        try:
            return EnvSpec.model_validate_json(path.read_text())
        except OSError as error:
            raise UserError(f"file {path}: cannot read: {error.strerror}") from error
        except ValidationError as error:
            raise UserError(f"file {path}: not an EnvSpec: {error.errors()[0]['loc']}: {error.errors()[0]['msg']}") from error
    try:
        family = get_family(text)
    except KeyError as error:
        raise UserError(str(error.args[0])) from error
    return EnvSpec(capability=family.capability, family=family.name)


def run_train(args: argparse.Namespace) -> int:
    from tracegym.adapters.train import CalibrationConfig, train_adapter
    from tracegym.synth_envs.registry import get_family

    spec = load_env_spec(args.env_spec)
    try:
        get_family(spec.family)
    except KeyError as error:
        raise UserError(f"{args.env_spec}: {error.args[0]}") from error
    config = GRPOConfig(
        steps=args.steps, credit=args.credit, groups_per_step=args.groups, group_size=args.group_size,
        learning_rate=args.lr, max_new_tokens=args.max_new_tokens, seed=args.seed, save_every=args.save_every,
        hint_fraction=args.hint_fraction,
    )
    warm = (
        WarmStartConfig(dialogues=args.warm_start_dialogues, steps=args.warm_start_steps,
                        batch_size=args.warm_start_batch, seed=args.seed)
        if args.warm_start else None
    )
    calibration = CalibrationConfig(seeds=args.calibration_seeds, rollouts=args.calibration_rollouts) if args.calibrate else None
    try:
        artifact = train_adapter(
            spec, args.out, config, model_name=args.model, warm=warm, resume=args.resume, heldout_seeds=args.heldout_seeds,
            calibration=calibration,
        )
    except FileExistsError as error:
        raise UserError(f"{error} (pass --resume)") from error
    print(json.dumps({"adapter": artifact.path, "credit": artifact.credit, **{
        k: artifact.metrics[k]["mean"] for k in ("heldout_before", "heldout_after") if k in artifact.metrics}}))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from tracegym.adapters.train import CalibrationConfig

    parser = subparsers.add_parser("train", help="train a LoRA adapter with GRPO (TRACE turn credit) on an environment",
                                   description=__doc__.splitlines()[0])
    defaults = GRPOConfig()
    parser.add_argument("env_spec", metavar="ENV_SPEC", help="EnvSpec JSON file or environment family name")
    parser.add_argument("--out", required=True, type=Path, help="output folder (adapter, log, curve, checkpoint)")
    parser.add_argument("--credit", choices=("trace", "grpo"), default="trace", help="turn credit or plain GRPO (default trace)")
    parser.add_argument("--warm-start", action="store_true", help="SFT on oracle dialogues first (needed by SmolLM2-135M)")
    warm_defaults, calibration_defaults = WarmStartConfig(), CalibrationConfig()
    parser.add_argument("--warm-start-dialogues", type=int, default=warm_defaults.dialogues,
                        help=f"oracle dialogues for the warm start (default {warm_defaults.dialogues})")
    parser.add_argument("--warm-start-steps", type=int, default=warm_defaults.steps,
                        help=f"warm-start optimizer steps (default {warm_defaults.steps})")
    parser.add_argument("--warm-start-batch", type=int, default=warm_defaults.batch_size,
                        help=f"dialogues per warm-start step (default {warm_defaults.batch_size})")
    parser.add_argument("--calibrate", action="store_true",
                        help="search the environment's knobs against the (warm-started) policy before GRPO")
    parser.add_argument("--calibration-seeds", type=int, default=calibration_defaults.seeds,
                        help=f"seeds per knob setting (default {calibration_defaults.seeds})")
    parser.add_argument("--calibration-rollouts", type=int, default=calibration_defaults.rollouts,
                        help=f"rollouts per seed (default {calibration_defaults.rollouts})")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"base model: {DEFAULT_MODEL}, a local dir, a hub id, or 'tiny' (smoke runs)")
    parser.add_argument("--steps", type=int, default=defaults.steps, help=f"GRPO steps (default {defaults.steps})")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    parser.add_argument("--groups", type=int, default=defaults.groups_per_step, help="groups (seeds) per step")
    parser.add_argument("--group-size", type=int, default=defaults.group_size, help="rollouts per group")
    parser.add_argument("--lr", type=float, default=defaults.learning_rate, help="learning rate")
    parser.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens,
                        help="tokens per assistant turn (default: 1.25 x the family's longest oracle turn)")
    parser.add_argument("--hint-fraction", type=float, default=defaults.hint_fraction, help="share of hinted rollouts")
    parser.add_argument("--save-every", type=int, default=defaults.save_every, help="checkpoint interval in steps")
    parser.add_argument("--heldout-seeds", type=int, default=32, help="evaluation seeds for before/after reward (0: skip)")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    parser.set_defaults(run=run_train)
