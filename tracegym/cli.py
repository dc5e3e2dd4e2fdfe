"""`tracegym` command line: one sub-command per stage, each registered by a CLI module of its stage.

Exit codes: 0 success, 1 the work failed (e.g. a bad input file), 2 usage error.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from tracegym import __version__
from tracegym.errors import UserError, one_line

# The module registering each command. Each defines `register(subparsers)`, adding its commands with
# `set_defaults(run=...)`; `run(args) -> int` returns the exit code. A command imports only its own
# module, so light commands (ingest, diagnose) never import what training needs; `--help` and an
# unknown command import them all.
COMMANDS: dict[str, str] = {
    "ingest": "tracegym.analysis.ingest_cli",
    "diagnose": "tracegym.analysis.diagnose_cli",
    "train": "tracegym.adapters.train_cli",
    "envs": "tracegym.synth_envs.envs_cli",
    "synth": "tracegym.synth_envs.synth_cli",
    "run": "tracegym.eval.run_cli",
    "eval": "tracegym.eval.eval_cli",
    "route": "tracegym.moe_router.route_cli",
    "serve": "tracegym.moe_router.serve_cli",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for `command` only, or for every command when it is None or unknown."""
    parser = argparse.ArgumentParser(prog="tracegym", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"tracegym {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for module_name in modules:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(next((word for word in argv if not word.startswith("-")), None))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s")
    try:
        return int(args.run(args) or 0)
    except UserError as error:
        print(f"tracegym {args.command}: error: {one_line(str(error))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"tracegym {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
