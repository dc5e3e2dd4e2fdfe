"""`tracegym train ENV_SPEC --out DIR`: train one LoRA adapter for an environment.

ENV_SPEC is an EnvSpec JSON file (family + knobs + seed ranges, as `tracegym synth` writes) or a
family name (its default knobs). Settings come from `TrainConfig` (flags, or `--config FILE`).
Exit codes: 0 trained, 1 bad input (unreadable spec, unknown family, a checkpoint in DIR without
--resume).

Several processes (one per GPU, or per CPU share) train one adapter when a launcher starts the
command, e.g. `accelerate launch --multi_gpu --num_processes 2 -m tracegym.cli train ...` (on the
CPU too: accelerate's `--cpu` starts several processes only through MPI) or `torchrun
--nproc_per_node 2 -m tracegym.cli train ...`: each process rolls out its share of the GRPO groups
and of the held-out seeds, the gradients are summed across processes, and only the main process
writes files, logs and prints.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from pydantic import ValidationError

from tracegym.adapters.config import TrainConfig
from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.schema import EnvSpec
from tracegym.synth_envs.registry import get_family


def load_env_spec(text: str) -> EnvSpec:
    """An EnvSpec from a JSON file path, or from a family name with default knobs."""
    path = Path(text)
    if path.suffix == ".json" or path.is_file():
        try:
            spec = EnvSpec.model_validate_json(path.read_text())
        except OSError as error:
            raise UserError(f"file {path}: cannot read: {error.strerror}") from error
        except ValidationError as error:
            raise UserError(
                f"file {path}: not an EnvSpec: {error.errors()[0]['loc']}: {error.errors()[0]['msg']}"
            ) from error
    else:
        spec = None
    try:
        family = get_family(spec.family if spec else text)
    except KeyError as error:
        raise UserError(f"{text}: {error.args[0]}") from error
    return spec or EnvSpec(capability=family.capability, family=family.name)


def run_train(args: argparse.Namespace) -> int:
    """Train; under several processes (a launcher's) only the main one logs below warnings and prints."""
    from tracegym.adapters.grpo import end_processes, process_state
    from tracegym.adapters.train import train_adapter

    spec = load_env_spec(args.env_spec)
    config = resolve_config(TrainConfig, args)
    main_process = process_state().is_main_process
    if not main_process:
        logging.getLogger().setLevel(logging.WARNING)
    try:
        artifact = train_adapter(spec, args.out, config, resume=args.resume)
    except FileExistsError as error:
        raise UserError(f"{error} (pass --resume)") from error
    end_processes()
    if not main_process:
        return 0
    print(
        json.dumps(
            {
                "adapter": artifact.path,
                "credit": artifact.credit,
                **{
                    key: artifact.metrics[key]
                    for key in ("heldout_before", "heldout_after", "heldout_difference")
                    if key in artifact.metrics
                },
            }
        )
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a LoRA adapter with GRPO (TRACE turn credit) on an environment",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("env_spec", metavar="ENV_SPEC", help="EnvSpec JSON file or environment family name")
    parser.add_argument("--out", required=True, type=Path, help="output folder (adapter, log, curve, checkpoint)")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    add_config_arguments(parser, TrainConfig)
    parser.set_defaults(run=run_train)
