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

from tracegym.errors import UserError
from tracegym.schema import Capability, CapabilityReport
from tracegym.synth_envs.base import play
from tracegym.synth_envs.calibration import Band, backend_measure
from tracegym.synth_envs.registry import families, make_env
from tracegym.synth_envs.synthesise import synthesise


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
    synth.add_argument("--calibrate", action="store_true", help="search each family's knobs against the policy")
    synth.add_argument("--backend", choices=["hf"], default="hf", help="generation backend for --calibrate")
    synth.add_argument("--model", default=None, help="policy model for --calibrate (default: the embedded model; 'tiny' for smoke runs)")
    synth.add_argument("--seeds", type=int, default=20, help="seeds per knob setting (paper: 100)")
    synth.add_argument("--rollouts", type=int, default=4, help="rollouts per seed (paper: 16)")
    synth.add_argument("--temperature", type=float, default=0.7)
    synth.add_argument("--max-new-tokens", type=int, default=None,
                       help="tokens per assistant turn (default: 1.25 x the family's longest oracle turn at each rung)")
    synth.add_argument("--hint-fraction", type=float, default=0.0, help="share of rollouts per seed given the hint")
    synth.add_argument("--band", type=float, nargs=2, default=(0.2, 0.6), metavar=("LOW", "HIGH"))
    synth.add_argument("--threshold", type=float, default=0.12, help="TF-IDF cosine needed to match by description")
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


def _backend(args: argparse.Namespace) -> tuple[Any, str]:
    from tracegym.generation import HFBackend
    from tracegym.models import DEFAULT_MODEL, load_model, tiny_model

    name = args.model or DEFAULT_MODEL
    model, tokenizer = tiny_model() if name == "tiny" else load_model(name)
    return HFBackend(model, tokenizer), f"{args.backend}:{name}"


def run_synth(args: argparse.Namespace) -> int:
    capabilities = _read_capabilities(args.capabilities)
    if not capabilities:
        raise UserError(f"file {args.capabilities}: no selected capabilities")
    band = Band(*args.band)
    measure, policy = None, ""
    if args.calibrate:
        from tracegym.generation import SamplingConfig

        backend, policy = _backend(args)
        measure = backend_measure(backend, SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature),
                                  hint_fraction=args.hint_fraction)
    synthesis = synthesise(capabilities, args.out, measure, policy, args.seeds, args.rollouts, band, args.threshold)
    matches, done, specs = synthesis.matches, synthesis.calibrations, synthesis.specs
    print(f"{'capability':34s} {'family':28s} {'matched by':12s} {'score':>6s}  calibration")
    for match in matches:
        calibration = done.get(match.family) if match.family else None
        state = ("-" if match.family is None else f"mean in band={calibration.in_band}" if calibration else "default knobs (uncalibrated)")
        print(f"{match.capability[:34]:34s} {match.family or 'UNMATCHED':28s} {match.method:12s} {match.score:6.3f}  {state}")
    unmatched = [m.capability for m in matches if m.family is None]
    print(f"wrote {len(specs)} env specs to {args.out / 'env_specs.jsonl'}" + (f"; unmatched: {', '.join(unmatched)}" if unmatched else ""))
    if not args.calibrate:
        print("specs use default knobs (not calibrated); pass --calibrate to fit them to a policy")
    return 0
