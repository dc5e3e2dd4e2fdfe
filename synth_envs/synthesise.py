"""Capabilities -> environment specs: match each capability to a family, optionally calibrate.

`synthesise` is what `tracegym synth` and `tracegym run` call. It writes into `out_dir`:
env_specs.jsonl (one EnvSpec per matched capability), matches.json (how each capability was
matched, unmatched ones included) and calibration.json (the search curves, or why there are none).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from tracegym.config import PolicyConfig, option
from tracegym.schema import Capability, EnvSpec, write_jsonl
from tracegym.synth_envs.calibration import Calibration, CalibrationConfig, Measure, calibrate, write_calibrations
from tracegym.synth_envs.registry import Match, get_family, match_capabilities

UNCALIBRATED = "default knobs: calibration is off (tracegym train calibrates against the policy it trains)"


@dataclass
class SynthConfig(PolicyConfig):
    """What `tracegym synth` does: match capabilities to families, calibrate against a policy."""

    calibration: CalibrationConfig = option(help="calibration", factory=CalibrationConfig)
    match_threshold: float = option(0.12, "TF-IDF cosine a proposed capability needs to match a family by description")


@dataclass
class Synthesis:
    """The specs written, how every capability was matched, and the calibrations run per family."""

    specs: list[EnvSpec]
    matches: list[Match]
    calibrations: dict[str, Calibration]


def synthesise(
    capabilities: list[Capability],
    out_dir: str | Path,
    config: SynthConfig,
    measure: Measure | None = None,
    policy: str = "",
) -> Synthesis:
    """Specs for `capabilities`; with `measure` (a policy, named `policy`), each family's knobs are
    calibrated per `config.calibration` and the spec records whether the mean landed in the band."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    matches = match_capabilities(capabilities, threshold=config.match_threshold)
    specs: list[EnvSpec] = []
    calibrations: dict[str, Calibration] = {}
    for match in matches:
        if match.family is None:
            continue
        if measure is not None and match.family not in calibrations:
            calibrations[match.family] = calibrate(match.family, measure, config.calibration, policy)
        calibration = calibrations.get(match.family)
        knobs = {**asdict(get_family(match.family).Config()), **(calibration.knobs if calibration else {})}
        summary = (
            {"calibrated": True, "in_band": calibration.in_band, "accepted": calibration.accepted, "policy": policy}
            if calibration
            else {"calibrated": False, "reason": UNCALIBRATED}
        )
        specs.append(EnvSpec(capability=match.capability, family=match.family, knobs=knobs, calibration=summary))
    write_jsonl(specs, out_dir / "env_specs.jsonl")
    (out_dir / "matches.json").write_text(json.dumps([asdict(m) for m in matches], indent=1))
    if calibrations:
        write_calibrations(list(calibrations.values()), out_dir / "calibration.json")
    else:
        (out_dir / "calibration.json").write_text(
            json.dumps({"families": [], "calibrated": False, "reason": UNCALIBRATED}, indent=1)
        )
    return Synthesis(specs, matches, calibrations)
