"""`tracegym serve MODEL`: an OpenAI-compatible server for a routed folder, or for a base model with
LoRA adapters.

MODEL is a folder `tracegym route` wrote, or a base model as `tracegym train --model` takes it
(`smollm2-135m`, `tiny`, a Hugging Face folder or hub id). A base model serves adapters given with
`--lora NAME=PATH` (repeatable) and, with `--lora-root DIR` (repeatable), adapters that clients
load and unload at run time from folders under DIR (`tracegym.moe_router.lora_registry`).

With an API key (`--api-key KEY`, else $TRACEGYM_API_KEY) every route but /health wants
`Authorization: Bearer KEY`; without one, only a loopback address may be bound. The key is never
printed or logged.

Exit codes: 0 stopped (Ctrl-C or SIGTERM), 1 bad input (no such model, an adapter that cannot be
served, an address that cannot be bound, a non-loopback address without a key), 2 usage error.
fastapi and torch are imported inside the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal

from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.moe_router.config import API_KEY_ENV, ServeConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="OpenAI-compatible server for a routed folder or a base model with LoRA adapters",
        description="OpenAI-compatible /v1/chat/completions, /v1/models and /health for a routed folder, or for a "
        "base model with LoRA adapters (vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter with --lora-root).",
    )
    serve.add_argument(
        "model",
        metavar="MODEL",
        help="a routed folder written by `tracegym route`, or a base model: smollm2-135m (embedded), tiny, "
        "a Hugging Face folder or hub id",
    )
    add_config_arguments(serve, ServeConfig)
    serve.add_argument(
        "--lora",
        dest="config.lora",
        action="append",
        default=argparse.SUPPRESS,
        metavar="NAME=PATH",
        help="serve the PEFT LoRA folder PATH as model NAME on the base model (repeatable)",
    )
    serve.add_argument(
        "--lora-root",
        dest="config.lora_root",
        action="append",
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="let clients load adapters at run time from folders under DIR (repeatable; without it, "
        "/v1/load_lora_adapter and /v1/unload_lora_adapter answer 403)",
    )
    serve.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from tracegym.moe_router.server import RunningServer, create_app

    config = serve_config(args)
    config.check_exposure()
    app, _ = create_app(args.model, config)
    try:
        server = RunningServer(app, config.host, config.port)
    except OSError as error:
        raise UserError(f"cannot listen on {config.host}:{config.port}: {error.strerror or error}") from None
    signal.signal(signal.SIGTERM, lambda signum, frame: setattr(server.server, "should_exit", True))
    with server:
        access = "API key required" if config.api_key else "no API key"
        adapters = "".join(f", adapter '{entry.partition('=')[0]}'" for entry in config.lora)
        loading = f"; adapters load at run time from {', '.join(config.lora_root)}" if config.lora_root else ""
        print(
            f"serving {args.model} as '{config.model_name}'{adapters} on {server.url}/v1 "
            f"({access}{loading}; Ctrl-C or SIGTERM stops)",
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
