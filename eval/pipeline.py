"""`tracegym run`: the whole loop in one resumable run directory, as a readable sequence of stages.

    trajectories/   the agent's runs, ingested          (tracegym ingest)
    analysis/       the capabilities it lacks           (tracegym diagnose)
    envs/           one environment spec per capability (tracegym synth)
    adapters/<c>/   one LoRA adapter per capability     (tracegym train: warm start, calibration, GRPO)

Without input runs the project writes a small τ²-style example run of its own, so a fresh clone
has something to diagnose. A stage whose artifacts are complete is skipped on rerun; an
interrupted training stage resumes from its checkpoint (tracegym.eval.rundir).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tracegym.adapters.checkpoint import find_checkpoint
from tracegym.adapters.grpo import CHECKPOINT_DIR
from tracegym.adapters.train import train_adapter
from tracegym.analysis.ingest.outputs import format_table
from tracegym.analysis.diagnose import diagnose
from tracegym.analysis.examples import write_example_run
from tracegym.analysis.ingest import ingest_paths
from tracegym.analysis.report import write_outputs
from tracegym.config import config_dict
from tracegym.eval.config import RunConfig
from tracegym.eval.rundir import RunDirectory
from tracegym.models import check_model
from tracegym.schema import AdapterArtifact, CapabilityReport, EnvSpec, read_jsonl, write_jsonl
from tracegym.synth_envs.synthesise import synthesise

logger = logging.getLogger(__name__)


def run_pipeline(out_dir: str | Path, config: RunConfig) -> dict[str, object]:
    """Run (or resume) every stage into `out_dir`; returns the summary also written to summary.json."""
    check_model(config.model)
    run = RunDirectory(out_dir, config_dict(config), [Path(p) for p in config.inputs])

    def ingest(stage: Path) -> list[Path]:
        inputs = [Path(p) for p in config.inputs] or [write_example_run(stage / "example_run")]
        result = ingest_paths(inputs)
        print(format_table(result))
        (stage / "ingest_report.json").write_text(json.dumps(result.report(), indent=1))
        write_jsonl(result.trajectories, stage / "trajectories.jsonl")
        return [stage / "trajectories.jsonl", stage / "ingest_report.json"]

    def analyse(stage: Path) -> list[Path]:
        trajectories = list(read_jsonl(run.root / "trajectories" / "trajectories.jsonl"))
        inputs = [Path(p) for p in config.inputs] or [run.root / "trajectories" / "example_run"]
        diagnosis = diagnose(trajectories, inputs, progress=True)
        write_outputs(diagnosis, stage)
        return [stage / "capabilities.json", stage / "report.md"]

    def synth(stage: Path) -> list[Path]:
        report = CapabilityReport.model_validate_json((run.root / "analysis" / "capabilities.json").read_text())
        synthesise(report.selected_capabilities(), stage, config)  # calibrated per adapter, after its warm start
        return [stage / "env_specs.jsonl", stage / "matches.json"]

    run.run_stage("trajectories", ingest)
    run.run_stage("analysis", analyse)
    run.run_stage("envs", synth)
    specs = list(read_jsonl(run.root / "envs" / "env_specs.jsonl", EnvSpec))
    artifacts = []
    for spec in specs[: config.max_adapters]:
        stage_name = f"adapters/{spec.capability}"
        run.run_stage(stage_name, lambda stage, spec=spec: _train(stage, spec, config))
        artifacts.append(AdapterArtifact.model_validate_json((run.root / stage_name / "artifact.json").read_text()))
    summary = _summary(run.root, specs, artifacts, config)
    (run.root / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _train(stage: Path, spec: EnvSpec, config: RunConfig) -> list[Path]:
    train_adapter(spec, stage, config, resume=find_checkpoint(stage / CHECKPOINT_DIR) is not None)
    return [stage / "artifact.json", stage / "adapter_model.safetensors"]


def _summary(root: Path, specs: list[EnvSpec], artifacts: list[AdapterArtifact], config: RunConfig) -> dict[str, object]:
    report = CapabilityReport.model_validate_json((root / "analysis" / "capabilities.json").read_text())
    trained = {a.capability: a for a in artifacts}
    rows = []
    for spec in specs:
        artifact = trained.get(spec.capability)
        metrics = artifact.metrics if artifact else {}
        rows.append({
            "capability": spec.capability,
            "family": spec.family,
            "adapter": artifact.path if artifact else None,
            "heldout_before": metrics.get("heldout_before", {}).get("greedy_reward", {}).get("mean"),
            "heldout_after": metrics.get("heldout_after", {}).get("greedy_reward", {}).get("mean"),
            "heldout_difference": metrics.get("heldout_difference", {}).get("greedy_reward"),
        })
    return {"run_dir": str(root), "selected": report.selected, "model": config.model, "adapters": rows}


def format_summary(summary: dict[str, object]) -> str:
    """The closing table of `tracegym run`."""
    lines = [f"run directory: {summary['run_dir']}   model: {summary['model']}",
             f"selected capabilities: {', '.join(summary['selected']) or 'none'}",
             "held-out greedy reward before -> after training, with the paired 95% interval of the change",
             f"{'capability':30s} {'family':28s} {'before':>7s} {'after':>7s} {'change [95% interval]':>24s}  adapter"]
    for row in summary["adapters"]:
        before, after, change = row["heldout_before"], row["heldout_after"], row["heldout_difference"]
        interval = f"{change['mean']:+.3f} [{change['low']:+.3f}, {change['high']:+.3f}]" if change else "-"
        lines.append(
            f"{row['capability'][:30]:30s} {row['family'][:28]:28s} "
            f"{'-' if before is None else f'{before:.3f}':>7s} {'-' if after is None else f'{after:.3f}':>7s} {interval:>24s}  "
            f"{row['adapter'] or 'not trained (raise --max-adapters)'}"
        )
    return "\n".join(lines)
