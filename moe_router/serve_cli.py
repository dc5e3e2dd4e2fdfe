"""`tracegym serve DIR`: an OpenAI-compatible server for a routed folder.

With an API key (`--api-key KEY`, else $TRACEGYM_API_KEY) every route but /health wants
`Authorization: Bearer KEY`; without one, only a loopback address may be bound. The key is never
printed or logged.

Exit codes: 0 stopped (Ctrl-C or SIGTERM), 1 bad input (no such folder, an address that cannot be
bound, a non-loopback address without a key), 2 usage error. fastapi and torch are imported inside
the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
from pathlib import Path

from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.moe_router.config import API_KEY_ENV, ServeConfig


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

    config = serve_config(args)
    config.check_exposure()
    if not args.folder.is_dir():
        raise UserError(f"{args.folder}: no such routed folder")
    app, _ = create_app(str(args.folder), config)
    try:
        server = RunningServer(app, config.host, config.port)
    except OSError as error:
        raise UserError(f"cannot listen on {config.host}:{config.port}: {error.strerror or error}") from None
    signal.signal(signal.SIGTERM, lambda signum, frame: setattr(server.server, "should_exit", True))
    with server:
        access = "API key required" if config.api_key else "no API key"
        print(
            f"serving {args.folder} as '{config.model_name}' on {server.url}/v1 ({access}; Ctrl-C or SIGTERM stops)",
            flush=True,
        )
        while server.thread.is_alive():
            server.thread.join(0.5)
    return 0


def serve_config(args: argparse.Namespace) -> ServeConfig:
    """The command's settings; `api_key` from $TRACEGYM_API_KEY when neither a flag nor the config
    file sets it (an empty variable counts as unset)."""
    config = resolve_config(ServeConfig, args)
    if config.api_key is None and os.environ.get(API_KEY_ENV):
        try:
            config = dataclasses.replace(config, api_key=os.environ[API_KEY_ENV])
        except ValueError as error:
            raise UserError(f"${API_KEY_ENV}: {error}") from None
    return config
