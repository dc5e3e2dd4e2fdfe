"""`tracegym serve DIR`: an OpenAI-compatible server for a routed folder.

Exit codes: 0 stopped (Ctrl-C or SIGTERM), 1 bad input (no such folder, an address that cannot be
bound), 2 usage error. fastapi and torch are imported inside the command.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.moe_router.config import ServeConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="OpenAI-compatible server for a routed folder (tools, streaming)",
        description="OpenAI-compatible /v1/chat/completions, /v1/models and /health for a routed folder.",
    )
    serve.add_argument("folder", type=Path, metavar="DIR", help="routed folder written by `tracegym route`")
    add_config_arguments(serve, ServeConfig)
    serve.set_defaults(run=run_serve)


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
        print(
            f"serving {args.folder} as '{config.model_name}' on {server.url}/v1 (Ctrl-C or SIGTERM stops)", flush=True
        )
        while server.thread.is_alive():
            server.thread.join(0.5)
    return 0
