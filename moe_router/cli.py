"""`tracegym route ADAPTER_DIR... --out DIR` and `tracegym serve DIR`.

route: trains the token router over the adapters (each a `tracegym train` folder: PEFT files plus
artifact.json) and writes a routed folder (adapters, gates, router.json, metrics.json). serve:
an OpenAI-compatible server for a routed folder. Exit codes: 0 done, 1 bad input (unreadable
adapter or routed folder, an existing --out without --overwrite), 2 usage error.

Heavy imports (torch, transformers, fastapi) happen inside the commands, so `tracegym --help`
stays light.
"""

from __future__ import annotations

import argparse
import json
import signal
from pathlib import Path

from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.moe_router.configs import RouterTrainingConfig, ServeConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    route = subparsers.add_parser("route", help="train a token router over adapters; write a folder serve and eval load",
                                  description=__doc__.splitlines()[0])
    route.add_argument("adapters", nargs="+", type=Path, metavar="ADAPTER_DIR", help="adapter folders written by `tracegym train`")
    route.add_argument("--out", type=Path, required=True, help="routed folder to write")
    route.add_argument("--model", default=None, help="base model (default: the one the adapters were trained on)")
    route.add_argument("--compute", choices=("auto", "stacked", "gather"), default="auto",
                       help="how routed tokens are computed (default auto: gather for long prefills, stacked for "
                            "decoding; measured in moe_router/mixture.py)")
    route.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    add_config_arguments(route, RouterTrainingConfig)
    route.set_defaults(run=run_route)

    serve = subparsers.add_parser("serve", help="OpenAI-compatible server for a routed folder (tools, streaming)",
                                  description="OpenAI-compatible /v1/chat/completions, /v1/models and /health for a routed folder.")
    serve.add_argument("folder", type=Path, metavar="DIR", help="routed folder written by `tracegym route`")
    add_config_arguments(serve, ServeConfig)
    serve.set_defaults(run=run_serve)


def run_route(args: argparse.Namespace) -> int:
    from tracegym.moe_router.route import build_router

    config = resolve_config(RouterTrainingConfig, args)
    manifest, metrics = build_router(args.adapters, args.out, config, args.model, args.compute, args.overwrite)
    token = metrics["token_router"]["heldout"]
    print(json.dumps({
        "out": str(args.out), "adapters": [a.name for a in manifest.adapters],
        "token_router_balanced_accuracy": token["balanced_accuracy"],
        "token_router_per_slot": {k: v["accuracy"] for k, v in token["per_slot"].items()},
        "heldout_family": token.get("heldout_family"),
        "task_router_accuracy": metrics["task_router"]["accuracy"],
    }))
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from tracegym.moe_router.server import RunningServer, create_app

    config = resolve_config(ServeConfig, args)
    if not args.folder.is_dir():
        raise UserError(f"{args.folder}: no such routed folder")
    app, _ = create_app(str(args.folder), config)
    try:
        server = RunningServer(app, config.host, config.port)
    except OSError as error:
        raise UserError(f"cannot listen on {config.host}:{config.port}: {error.strerror or error}") from None
    signal.signal(signal.SIGTERM, lambda signum, frame: setattr(server.server, "should_exit", True))
    with server:
        print(f"serving {args.folder} as '{config.model_name}' on {server.url}/v1 (Ctrl-C or SIGTERM stops)", flush=True)
        while server.thread.is_alive():
            server.thread.join(0.5)
    return 0
