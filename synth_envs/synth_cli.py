"""`tracegym synth CAPABILITIES.json --out DIR`: turn a diagnosis's selected capabilities into env specs.

Matches the report's selected capabilities to families and writes DIR/env_specs.jsonl (one EnvSpec
each), DIR/matches.json (how each capability was matched, unmatched ones included) and
DIR/calibration.json. With `--calibrate` each family's knobs are searched against the model given
by --model; without it the specs keep the default knobs and calibration.json says they are
uncalibrated. Exit codes: 0 done, 1 bad input, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tracegym.config import TINY_MODEL, add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.schema import Capability, CapabilityReport
from tracegym.synth_envs.calibration import backend_measure
from tracegym.synth_envs.synthesise import SynthConfig, synthesise


def register(subparsers: argparse._SubParsersAction) -> None:
    synth = subparsers.add_parser("synth", help="environment specs (and calibration) for a capability report")
    synth.add_argument(
        "capabilities", type=Path, help="capabilities.json (a CapabilityReport) or a JSON list of capabilities"
    )
    synth.add_argument("--out", type=Path, required=True, help="output folder")
    add_config_arguments(synth, SynthConfig)
    synth.set_defaults(run=run_synth)


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
        raise UserError(
            f"file {path}: not a CapabilityReport or a list of capabilities: {str(error).splitlines()[0]}"
        ) from None


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
        state = (
            "-"
            if match.family is None
            else f"mean in band={calibration.in_band}"
            if calibration
            else "default knobs (uncalibrated)"
        )
        print(
            f"{match.capability[:34]:34s} {match.family or 'UNMATCHED':28s} {match.method:12s} "
            f"{match.score:6.3f}  {state}"
        )
    unmatched = [m.capability for m in matches if m.family is None]
    print(
        f"wrote {len(specs)} env specs to {args.out / 'env_specs.jsonl'}"
        + (f"; unmatched: {', '.join(unmatched)}" if unmatched else "")
    )
    if measure is None:
        print("specs use default knobs (calibration off); tracegym train calibrates them against the policy it trains")
    return 0
