"""`tracegym envs list|show` and `tracegym synth`: browse families, turn capabilities into env specs.

`tracegym synth CAPABILITIES.json --out DIR` matches the report's selected capabilities to
families and writes DIR/env_specs.jsonl (one EnvSpec each), DIR/matches.json (how each
capability was matched, unmatched ones included) and DIR/calibration.json. With `--calibrate`
each family's knobs are searched against the policy given by --backend/--model; without it the
specs keep the default knobs and calibration.json says they are uncalibrated.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tracegym.config import TINY_MODEL, add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.schema import Capability, CapabilityReport
from tracegym.synth_envs.base import play
from tracegym.synth_envs.calibration import backend_measure
from tracegym.synth_envs.registry import families, make_env
from tracegym.synth_envs.synthesise import SynthConfig, synthesise


def register(subparsers: argparse._SubParsersAction) -> None:
    envs = subparsers.add_parser("envs", help="list environment families or show an episode with its oracle solution")
    commands = envs.add_subparsers(dest="envs_command", metavar="ACTION", required=True)
    listing = commands.add_parser("list", help="the registered families, their capability and knobs")
    listing.set_defaults(run=run_list)
    show = commands.add_parser("show", help="print one episode, its oracle solution and the reward")
    show.add_argument("family")
    show.add_argument("--seed", type=int, default=0)
    show.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE", help="difficulty knob (JSON value), repeatable")
    show.add_argument("--hint", action="store_true", help="include the hint in the system prompt")
    show.set_defaults(run=run_show)

    synth = subparsers.add_parser("synth", help="environment specs (and calibration) for a capability report")
    synth.add_argument("capabilities", type=Path, help="capabilities.json (a CapabilityReport) or a JSON list of capabilities")
    synth.add_argument("--out", type=Path, required=True, help="output folder")
    add_config_arguments(synth, SynthConfig)
    synth.set_defaults(run=run_synth)


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
    print(f"\n=== oracle reward {result.reward}  breakdown {json.dumps(result.info.get('reward_breakdown', {}), default=str)}")
    print(f"=== gold answer: {env.gold_answer(args.seed)}")
    return 0


def _read_capabilities(path: Path) -> list[Capability]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise UserError(f"file {path}: cannot read JSON: {error}") from None
    try:
        if isinstance(data, list):
            return [Capability.model_validate(item) for item in data]
        return CapabilityReport.model_validate(data).selected_capabilities()
    except (ValidationError, KeyError) as error:
        raise UserError(f"file {path}: not a CapabilityReport or a list of capabilities: {str(error).splitlines()[0]}") from None


def _backend(model_name: str) -> Any:
    from tracegym.generation import HFBackend
    from tracegym.models import check_model, load_model, tiny_model

    check_model(model_name)
    model, tokenizer = tiny_model() if model_name == TINY_MODEL else load_model(model_name)
    return HFBackend(model, tokenizer)


def run_synth(args: argparse.Namespace) -> int:
    capabilities = _read_capabilities(args.capabilities)
    if not capabilities:
        raise UserError(f"file {args.capabilities}: no selected capabilities")
    config = resolve_config(SynthConfig, args)
    measure, policy = None, ""
    if config.calibration.enabled:
        measure, policy = backend_measure(_backend(config.model), config.rollout), f"hf:{config.model}"
    synthesis = synthesise(capabilities, args.out, config, measure, policy)
    matches, done, specs = synthesis.matches, synthesis.calibrations, synthesis.specs
    print(f"{'capability':34s} {'family':28s} {'matched by':12s} {'score':>6s}  calibration")
    for match in matches:
        calibration = done.get(match.family) if match.family else None
        state = ("-" if match.family is None else f"mean in band={calibration.in_band}" if calibration else "default knobs (uncalibrated)")
        print(f"{match.capability[:34]:34s} {match.family or 'UNMATCHED':28s} {match.method:12s} {match.score:6.3f}  {state}")
    unmatched = [m.capability for m in matches if m.family is None]
    print(f"wrote {len(specs)} env specs to {args.out / 'env_specs.jsonl'}" + (f"; unmatched: {', '.join(unmatched)}" if unmatched else ""))
    if measure is None:
        print("specs use default knobs (calibration off); tracegym train calibrates them against the policy it trains")
    return 0
