"""`tracegym` command line: one sub-command per stage, each registered by its stage's `cli` module.

Exit codes: 0 success, 1 the work failed (e.g. a bad input file), 2 usage error.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from tracegym import __version__
from tracegym.errors import UserError

# Each module defines `register(subparsers)`, adding its commands with `set_defaults(run=...)`;
# `run(args) -> int` returns the exit code.
STAGE_CLIS: tuple[str, ...] = ("tracegym.analysis.cli", "tracegym.analysis.diagnose_cli", "tracegym.adapters.cli", "tracegym.synth_envs.cli", "tracegym.moe_router.cli", "tracegym.eval.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tracegym", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"tracegym {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in STAGE_CLIS:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s")
    try:
        return int(args.run(args) or 0)
    except UserError as error:
        print(f"tracegym {args.command}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"tracegym {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
