"""`tracegym eval POLICY... --out DIR`: score policies on the same held-out seeds, paired.

POLICY is `base`, a PEFT adapter folder or a routed folder; the environment is the first
adapter's (its artifact.json) unless `--family` names one (`--knobs` sets its difficulty).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.eval.config import EvaluateConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="score policies (base, adapters, routed) on held-out seeds, paired",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("policies", nargs="+", metavar="POLICY", help="base, a PEFT adapter folder or a routed folder")
    parser.add_argument("--family", help="environment family (default: the first adapter's environment)")
    parser.add_argument(
        "--knobs", type=json.loads, default={}, help="difficulty knobs as a JSON object (with --family)"
    )
    parser.add_argument("--out", type=Path, help="write eval.json here")
    add_config_arguments(parser, EvaluateConfig)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tracegym.eval.evaluate import evaluate_policies, format_evaluation, load_policy
    from tracegym.files import write_text_atomic
    from tracegym.schema import EnvSpec
    from tracegym.synth_envs.registry import get_family

    config = resolve_config(EvaluateConfig, args)
    if args.family:
        try:
            family = get_family(args.family)
        except KeyError as error:
            raise UserError(str(error.args[0])) from None
        spec = EnvSpec(capability=family.capability, family=family.name, knobs=args.knobs)
    else:
        trained = [p for p in args.policies if p != "base"]
        spec = load_policy(trained[0], config.model).env_spec if trained else None
        if spec is None:
            raise UserError("no environment: pass --family, or an adapter folder whose artifact.json names one")
    result = evaluate_policies(args.policies, spec, config)
    print(format_evaluation(result))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.out / "eval.json", json.dumps(result, indent=1))
        print(f"wrote {args.out / 'eval.json'}")
    return 0
