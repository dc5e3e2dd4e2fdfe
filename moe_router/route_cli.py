"""`tracegym route ADAPTER_DIR... --out DIR`: train the token router over adapters.

Each adapter is a `tracegym train` folder (PEFT files plus artifact.json); the routed folder holds
the adapters, the gates, router.json and metrics.json. Exit codes: 0 done, 1 bad input (an
unreadable adapter folder, an existing --out without --overwrite), 2 usage error. torch and
transformers are imported inside the command, so `tracegym --help` stays light.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tracegym.config import add_config_arguments, resolve_config
from tracegym.moe_router.config import RouterTrainingConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    route = subparsers.add_parser(
        "route",
        help="train a token router over adapters; write a folder serve and eval load",
        description=__doc__.splitlines()[0],
    )
    route.add_argument(
        "adapters", nargs="+", type=Path, metavar="ADAPTER_DIR", help="adapter folders written by `tracegym train`"
    )
    route.add_argument("--out", type=Path, required=True, help="routed folder to write")
    route.add_argument("--model", default=None, help="base model (default: the one the adapters were trained on)")
    route.add_argument(
        "--compute",
        choices=("auto", "stacked", "gather"),
        default="auto",
        help="how routed tokens are computed (default auto: gather for long prefills, stacked for "
        "decoding; see docs/design.md)",
    )
    route.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    add_config_arguments(route, RouterTrainingConfig)
    route.set_defaults(run=run_route)


def run_route(args: argparse.Namespace) -> int:
    from tracegym.moe_router.route import build_router

    config = resolve_config(RouterTrainingConfig, args)
    manifest, metrics = build_router(args.adapters, args.out, config, args.model, args.compute, args.overwrite)
    token = metrics["token_router"]["heldout"]
    print(
        json.dumps(
            {
                "out": str(args.out),
                "adapters": [a.name for a in manifest.adapters],
                "token_router_balanced_accuracy": token["balanced_accuracy"],
                "token_router_per_slot": {k: v["accuracy"] for k, v in token["per_slot"].items()},
                "heldout_family": token.get("heldout_family"),
                "task_router_accuracy": metrics["task_router"]["accuracy"],
            }
        )
    )
    return 0
