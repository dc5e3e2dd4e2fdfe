"""`tracegym envs list|show`: browse the environment families and play one episode's oracle."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from tracegym.errors import UserError
from tracegym.synth_envs.base import play
from tracegym.synth_envs.registry import families, make_env


def register(subparsers: argparse._SubParsersAction) -> None:
    envs = subparsers.add_parser("envs", help="list environment families or show an episode with its oracle solution")
    commands = envs.add_subparsers(dest="envs_command", metavar="ACTION", required=True)
    listing = commands.add_parser("list", help="the registered families, their capability and knobs")
    listing.set_defaults(run=run_list)
    show = commands.add_parser("show", help="print one episode, its oracle solution and the reward")
    show.add_argument("family")
    show.add_argument("--seed", type=int, default=0)
    show.add_argument(
        "--knob", action="append", default=[], metavar="NAME=VALUE", help="difficulty knob (JSON value), repeatable"
    )
    show.add_argument("--hint", action="store_true", help="include the hint in the system prompt")
    show.set_defaults(run=run_show)


def run_list(args: argparse.Namespace) -> int:
    for name, cls in families().items():
        knobs = ", ".join(f"{k}={v}" for k, v in asdict(cls.Config()).items())
        print(f"{name:28s} {knobs}")
        print(f"{'':28s} {cls.description}")
    return 0


def _knobs(pairs: list[str]) -> dict[str, Any]:
    knobs = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if not value:
            raise UserError(f"--knob {pair!r}: expected NAME=VALUE")
        try:
            knobs[name] = json.loads(value)
        except json.JSONDecodeError:
            knobs[name] = value
    return knobs


def run_show(args: argparse.Namespace) -> int:
    try:
        env = make_env(args.family, **_knobs(args.knob))
    except KeyError as error:
        raise UserError(str(error.args[0])) from None
    except TypeError as error:
        raise UserError(f"bad knob: {error}") from None
    messages, result = play(env, args.seed, env.oracle(args.seed), hint=args.hint)
    print(f"# {env.name}  seed {args.seed}  knobs {json.dumps(env.knobs())}")
    for message in messages:
        print(f"\n--- {message.role} ---\n{message.content}")
    breakdown = json.dumps(result.info.get("reward_breakdown", {}), default=str)
    print(f"\n=== oracle reward {result.reward}  breakdown {breakdown}")
    print(f"=== gold answer: {env.gold_answer(args.seed)}")
    return 0
