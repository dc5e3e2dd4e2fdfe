"""`tracegym run`: the whole loop in one resumable run directory, as a readable sequence of stages.

On the target environment (no input runs; `RunConfig.target`):

    base_agent/        the base agent: the model warm-started on train-split oracle dialogues
    trajectories/      its runs on the train split (τ² Results in results/, trajectories.jsonl)
    analysis/          the capabilities it lacks                 (tracegym diagnose)
    envs/              one environment spec per capability       (tracegym synth)
    adapters/<c>/      one LoRA adapter per capability, GRPO from the base agent (tracegym train)
    plain_grpo/        GRPO on the target's train split at the adapters' total rollouts
    router/routed/     the token router over the adapters, the target's own dialogues left to the base
    eval/<arm>/        each arm on the held-out split: metrics.json, τ² Results, trajectories
    report/            report.md, comparisons.json, plots

On someone else's runs (`tracegym run PATH...`): trajectories/ holds them ingested, then analysis,
envs and adapters (trained from `--model`) as above; nothing is evaluated on the target.

A stage whose artifacts are complete is skipped on rerun; an interrupted stage runs again in its
folder, and a training stage resumes from its checkpoint (tracegym.eval.rundir). Library output
goes to run.log (tracegym.eval.run_log).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from tracegym.adapters.artifacts import CURVE_FILE
from tracegym.adapters.checkpoint import find_checkpoint
from tracegym.adapters.grpo import CHECKPOINT_DIR
from tracegym.adapters.sft import Rehearsal
from tracegym.adapters.train import load_base, train_adapter
from tracegym.analysis.catalogue import CATALOGUE
from tracegym.analysis.diagnose import diagnose
from tracegym.analysis.ingest import ingest_paths
from tracegym.analysis.ingest.outputs import format_table
from tracegym.analysis.report import selection_table, write_outputs
from tracegym.config import config_dict
from tracegym.errors import UserError
from tracegym.eval.arms import Arm, adapter_arm, evaluate_arm, heldout_seeds, split_summary
from tracegym.eval.base_agent import MODEL_DIR, make_base_agent
from tracegym.eval.config import STOP_POINTS, RunConfig
from tracegym.eval.gap_figures import NOGAP_ARM, format_gap, gap_figures
from tracegym.eval.loop_report import write_report
from tracegym.eval.play import play_target
from tracegym.eval.run_log import announce, library_output_to, printed_to_log
from tracegym.eval.rundir import RunDirectory
from tracegym.eval.stage_pool import run_stages
from tracegym.eval.target import TargetEnvironment, make_target, write_runs
from tracegym.eval.target.planted import GappedTarget
from tracegym.generation import SamplingConfig
from tracegym.models import check_model
from tracegym.moe_router.route import build_router
from tracegym.moe_router.router_data import DomainText
from tracegym.schema import AdapterArtifact, Capability, CapabilityReport, EnvSpec, read_jsonl, write_jsonl
from tracegym.synth_envs.synthesise import synthesise

logger = logging.getLogger(__name__)
RESULTS_FILE = "trajectories/results/base_agent.json"
ROLLOUT_SEED = 2_024  # sampling seed of the base agent's train-split runs
ROUTED = "router/routed"


def run_pipeline(out_dir: str | Path, config: RunConfig, stop_after: str | None = None) -> dict[str, object]:
    """Run (or resume) every stage into `out_dir`, or those up to `stop_after` (one of `STOP_POINTS`; a
    later call without it carries on); returns the summary also written to summary.json."""
    if stop_after is not None and stop_after not in STOP_POINTS:
        raise ValueError(f"stop_after must be one of {', '.join(STOP_POINTS)}, got {stop_after!r}")
    check_model(config.model)
    run = RunDirectory(out_dir, config_dict(config), [Path(p) for p in config.inputs], config_dict(RunConfig()))
    with library_output_to(run.root):
        stage = functools.partial(_stage, run)
        if config.inputs:
            inputs, policy = [Path(p) for p in config.inputs], config.model
            stage("trajectories", lambda folder: _ingest(folder, inputs))
        else:
            inputs, policy = [run.root / RESULTS_FILE], str(run.root / "base_agent" / MODEL_DIR)
            stage("base_agent", lambda folder: _base_agent(folder, run.root, config))
            stage("trajectories", lambda folder: _rollouts(folder, run.root, policy, config))
        if stop_after != "trajectories":
            stage("analysis", lambda folder: _analyse(folder, run.root, inputs))
        if stop_after is not None:
            return _stopped(run, config, stop_after)
        if not config.inputs and config.base_agent.gap:  # the ceiling arm, needed only for the held-out arms
            stage("base_agent_nogap", lambda folder: _base_agent(folder, run.root, config, gap=""))
        stage("envs", lambda folder: _synth(folder, run.root, config))
        specs = list(read_jsonl(run.root / "envs" / "env_specs.jsonl", EnvSpec))
        train_config = replace(config, model=policy)
        rehearsal = None if config.inputs else base_agent_rehearsal(config)
        artifacts = []
        for spec in specs[: config.max_adapters]:
            name = f"adapters/{spec.capability}"
            stage(name, lambda folder, spec=spec: _train(folder, run.root, spec, train_config, rehearsal=rehearsal))
            artifacts.append(AdapterArtifact.model_validate_json((run.root / name / "artifact.json").read_text()))
        run.record(
            "turn_budget_tokens",
            {
                a.capability: {"family": a.env_spec.family, "tokens": a.metrics.get("turn_budget_tokens")}
                for a in artifacts
            },
        )
        summary = _summary(run.root, specs, artifacts, config)
        if not config.inputs:
            arms = _close_loop(run, config, policy, artifacts)
            summary["report"] = str(run.root / "report" / "report.md")
            if config.base_agent.gap:
                summary["planted_gap"] = gap_figures(run.root, config.base_agent.gap)
            summary["arms"] = {
                arm: {
                    key: json.loads((run.root / "eval" / arm / "metrics.json").read_text())[key]
                    for key in ("success", "reward", "rollouts")
                }
                for arm in arms
            }
    (run.root / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _stopped(run: RunDirectory, config: RunConfig, stop_after: str) -> dict[str, object]:
    """The summary of a run ended at `stop_after`: the diagnosis's selection when the analysis stage
    is complete in this run directory (None otherwise) and, with a planted gap, its figures so far.
    Written to summary.json unless that holds the summary of the run finished past the stop point
    (its envs stage complete), which is kept."""
    root, selected = run.root, None
    if run.is_complete("analysis"):
        selected = CapabilityReport.model_validate_json((root / "analysis" / "capabilities.json").read_text()).selected
    summary: dict[str, object] = {
        "run_dir": str(root),
        "model": config.model,
        "stopped_after": stop_after,
        "selected": selected,
    }
    if config.base_agent.gap and not config.inputs and selected is not None:
        summary["planted_gap"] = gap_figures(root, config.base_agent.gap)
    if not _finished(run):
        (root / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _finished(run: RunDirectory) -> bool:
    """Whether summary.json holds the summary of a run that went past every stop point (not one of
    `--stop-after`, and the envs stage, which every run past them makes, is complete)."""
    path = run.root / "summary.json"
    try:
        written = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(written, dict) and "stopped_after" not in written and run.is_complete("envs")


def _stage(run: RunDirectory, name: str, work: Callable[[Path], Iterable[Path]]) -> None:
    done = run.is_complete(name)
    announce(name, done)
    if not done:
        run.run_stage(name, work)


def _ingest(folder: Path, inputs: list[Path]) -> list[Path]:
    result = ingest_paths(inputs)
    print(format_table(result))
    (folder / "ingest_report.json").write_text(json.dumps(result.report(), indent=1))
    write_jsonl(result.trajectories, folder / "trajectories.jsonl")
    return [folder / "trajectories.jsonl", folder / "ingest_report.json"]


def _base_agent(folder: Path, root: Path, config: RunConfig, gap: str | None = None) -> list[Path]:
    """The base agent (with `config.base_agent.gap` planted, or with `gap` when given)."""
    base_agent = config.base_agent if gap is None else replace(config.base_agent, gap=gap)
    with printed_to_log(root):
        return make_base_agent(config.model, base_agent, config.target, folder)


def _rollouts(folder: Path, root: Path, policy: str, config: RunConfig) -> list[Path]:
    """The base agent's sampled runs on the train split, written as τ² Results + trajectories."""
    model, tokenizer = load_base(policy)
    params = SamplingConfig(
        max_new_tokens=config.rollout.max_new_tokens, temperature=config.rollout.temperature, seed=ROLLOUT_SEED
    )
    started = time.perf_counter()
    records = play_target(
        model, tokenizer, config.target, range(config.target.train_tasks), config.loop.train_trials, params
    )
    results = root / RESULTS_FILE
    write_runs(
        make_target(config.target),
        records,
        results,
        folder / "trajectories.jsonl",
        agent="tracegym:base_agent",
        model=config.model,
    )
    summary = {
        **split_summary(records),
        "trials": config.loop.train_trials,
        "temperature": config.rollout.temperature,
        "seconds": round(time.perf_counter() - started, 1),
    }
    (folder / "rollouts.json").write_text(json.dumps(summary, indent=1))
    return [results, folder / "trajectories.jsonl", folder / "rollouts.json"]


def _analyse(folder: Path, root: Path, inputs: list[Path]) -> list[Path]:
    trajectories = list(read_jsonl(root / "trajectories" / "trajectories.jsonl"))
    diagnosis = diagnose(trajectories, inputs, progress=True)
    write_outputs(diagnosis, folder)
    print(selection_table(diagnosis.report))
    return [folder / "capabilities.json", folder / "report.md"]


def trained_capabilities(report: CapabilityReport, fallback: list[str]) -> list[Capability]:
    """The selected capabilities, or when none is selected the `fallback` ones (catalogue names,
    whether or not the report labels them)."""
    if report.selected or not fallback:
        return report.selected_capabilities()
    catalogue = {capability.name: capability for capability in CATALOGUE}
    return [catalogue[name] for name in fallback]


def _synth(folder: Path, root: Path, config: RunConfig) -> list[Path]:
    report = CapabilityReport.model_validate_json((root / "analysis" / "capabilities.json").read_text())
    synthesise(
        trained_capabilities(report, config.loop.fallback_capabilities), folder, config
    )  # calibrated per adapter
    return [folder / "env_specs.jsonl", folder / "matches.json"]


def base_agent_rehearsal(config: RunConfig) -> Rehearsal | None:
    """The base agent's own first `loop.rehearsal_dialogues` demonstrations (its planted gap
    included), for each adapter's warm start; None when there are none to rehearse."""
    count = config.loop.rehearsal_dialogues
    if not count:
        return None
    if count > config.target.train_tasks:
        raise UserError(
            f"loop.rehearsal_dialogues {count} is more than the train split's {config.target.train_tasks} tasks"
        )
    return Rehearsal([functools.partial(GappedTarget, config.target, config.base_agent.gap)], range(count))


def _train(
    folder: Path,
    root: Path,
    spec: EnvSpec,
    config: RunConfig,
    env_factory: Callable[[], TargetEnvironment] | None = None,
    rehearsal: Rehearsal | None = None,
) -> list[Path]:
    with printed_to_log(root):  # the warm start's SFT trainer prints its loss dicts
        resume = find_checkpoint(folder / CHECKPOINT_DIR) is not None
        train_adapter(spec, folder, config, resume=resume, env_factory=env_factory, rehearsal=rehearsal)
    return [folder / "artifact.json", folder / "adapter_model.safetensors"]


def calibration_rollouts(adapter_dir: Path) -> int:
    """Episodes the adapter's calibration played (0 without calibration.json)."""
    path = adapter_dir / "calibration.json"
    if not path.is_file():
        return 0
    families = json.loads(path.read_text())["families"]
    return sum(point["seeds"] * point["rollouts"] for family in families for point in family["curve"])


def _close_loop(run: RunDirectory, config: RunConfig, policy: str, artifacts: list[AdapterArtifact]) -> list[str]:
    """Plain GRPO, the router, the held-out arms and the report; returns the arms' names."""
    stage = functools.partial(_stage, run)

    def seconds(name: str) -> float:
        return run.manifest["stages"][name]["seconds"]

    adapter_dirs = [Path(a.path) for a in artifacts]
    rollouts = sum(int(a.metrics["rollouts"]) for a in artifacts)
    calibrated = sum(calibration_rollouts(d) for d in adapter_dirs)
    adapters_seconds = sum(seconds(f"adapters/{a.capability}") for a in artifacts)
    arms = [Arm("base", "model", policy, "", policy, 0, 0, 0.0)]
    if config.base_agent.gap:  # the ceiling: the same warm start without the planted gap
        nogap = str(run.root / "base_agent_nogap" / MODEL_DIR)
        arms.append(Arm(NOGAP_ARM, "model", nogap, "", nogap, 0, 0, 0.0))
    for artifact, folder in zip(artifacts, adapter_dirs):
        arms.append(
            Arm(
                adapter_arm(artifact.capability),
                "peft",
                str(folder),
                "",
                policy,
                int(artifact.metrics["rollouts"]),
                calibration_rollouts(folder),
                seconds(f"adapters/{artifact.capability}"),
            )
        )
    if artifacts:
        stage("router", lambda folder: _route(folder, adapter_dirs, policy, config))
        routed, spent = str(run.root / ROUTED), adapters_seconds + seconds("router")
        arms += [
            Arm("task_router", "routed", routed, "task", policy, rollouts, calibrated, spent),
            Arm("mixture", "routed", routed, "token", policy, rollouts, calibrated, spent),
        ]
    training_logs = {adapter_arm(a.capability): d for a, d in zip(artifacts, adapter_dirs)}
    if config.loop.plain_grpo and rollouts:
        stage("plain_grpo", lambda folder: _plain_grpo(folder, run.root, policy, rollouts, config))
        plain = AdapterArtifact.model_validate_json((run.root / "plain_grpo" / "artifact.json").read_text())
        arms.append(
            Arm("plain_grpo", "peft", plain.path, "", policy, int(plain.metrics["rollouts"]), 0, seconds("plain_grpo"))
        )
        training_logs["plain_grpo"] = Path(plain.path)
    evaluate = functools.partial(evaluate_arm, progress=config.loop.eval_workers == 1)  # workers' bars would interleave
    run_stages(
        run,
        {
            f"eval/{arm.name}": (evaluate, (arm, config.target, config.rollout.max_new_tokens))
            for arm in arms
            if arm.route != "task"
        },
        config.loop.eval_workers,
    )
    for arm in arms:  # the task router reuses the episodes of the arms it routes to
        if arm.route == "task":
            stage(
                f"eval/{arm.name}",
                lambda folder, arm=arm: evaluate_arm(arm, config.target, config.rollout.max_new_tokens, folder),
            )
    trained = [a.capability for a in artifacts]
    names, gap = [a.name for a in arms], config.base_agent.gap
    stage("report", lambda folder: write_report(run.root, names, trained, training_logs, folder, gap))
    return [a.name for a in arms]


def _route(folder: Path, adapter_dirs: list[Path], policy: str, config: RunConfig) -> list[Path]:
    out = folder / "routed"
    build_router(adapter_dirs, out, config.router, model_name=policy, overwrite=True, domain=target_domain(config))
    return sorted(p for p in out.rglob("*") if p.is_file())


def target_domain(config: RunConfig) -> DomainText:
    """The target's train-split oracle dialogues the router leaves to the base: the first
    `router.train_dialogues` tasks to train on, the next `router.heldout_dialogues` held out (never a
    held-out task of the loop)."""
    trained = min(config.router.train_dialogues, config.target.train_tasks)
    heldout = range(trained, min(trained + config.router.heldout_dialogues, config.target.train_tasks))
    return DomainText(TargetEnvironment.name, make_target(config.target), range(trained), heldout)


def _plain_grpo(folder: Path, root: Path, policy: str, rollouts: int, config: RunConfig) -> list[Path]:
    """GRPO on the target's train split with at least `rollouts` training episodes, from the base agent."""
    per_step = config.grpo.groups_per_step * config.grpo.group_size
    target = config.target
    spec = EnvSpec(
        capability="plain_grpo",
        family=TargetEnvironment.name,
        knobs={},
        train_seeds=(0, target.train_tasks),
        eval_seeds=(heldout_seeds(target)[0], heldout_seeds(target)[-1] + 1),
    )
    plain = replace(
        config,
        model=policy,
        grpo=replace(config.grpo, steps=math.ceil(rollouts / per_step)),
        warm_start=replace(config.warm_start, enabled=False),
        eval=replace(config.eval, seeds=0),
    )
    return _train(folder, root, spec, plain, env_factory=functools.partial(make_target, target))


SUMMARY_METRICS = ("greedy_reward", "sampled_reward")  # the held-out figures of each adapter in the closing table


def _summary(
    root: Path, specs: list[EnvSpec], artifacts: list[AdapterArtifact], config: RunConfig
) -> dict[str, object]:
    report = CapabilityReport.model_validate_json((root / "analysis" / "capabilities.json").read_text())
    trained = {a.capability: a for a in artifacts}
    rows = []
    for spec in specs:
        artifact = trained.get(spec.capability)
        metrics = artifact.metrics if artifact else {}
        heldout = {
            metric: {
                "before": metrics["heldout_before"][metric]["mean"],
                "after": metrics["heldout_after"][metric]["mean"],
                "difference": metrics["heldout_difference"][metric],
            }
            for metric in SUMMARY_METRICS
            if metric in metrics.get("heldout_difference", {})
        }
        rows.append(
            {
                "capability": spec.capability,
                "family": spec.family,
                "adapter": artifact.path if artifact else None,
                "knobs": (artifact.env_spec if artifact else spec).knobs,
                "calibrated": bool(artifact and artifact.env_spec.calibration.get("calibrated")),
                "heldout": heldout,
            }
        )
    return {"run_dir": str(root), "selected": report.selected, "model": config.model, "adapters": rows}


def format_summary(summary: dict[str, object]) -> str:
    """The closing table of `tracegym run`."""
    head = f"run directory: {summary['run_dir']}   model: {summary['model']}"
    if "stopped_after" in summary:
        selected = summary["selected"]
        lines = [head, f"stopped after {summary['stopped_after']} (rerun without --stop-after to carry on)"]
        if selected is not None:
            lines.append(f"selected capabilities: {', '.join(selected) or 'none'}")
        if "planted_gap" in summary:
            lines.append(format_gap(summary["planted_gap"])[0])  # planted against selected: no arm played yet
        return "\n".join(lines)
    lines = [
        head,
        f"selected capabilities: {', '.join(summary['selected']) or 'none'}",
        "held-out reward on each adapter's environment before -> after GRPO, "
        "with the paired 95% interval of the change",
        f"{'capability':28s} {'family':26s} {'episodes':15s} {'before':>7s} {'after':>7s} "
        f"{'change [95% interval]':>24s}  adapter",
    ]
    for row in summary["adapters"]:
        scored = row["heldout"] or {"-": {"before": None, "after": None, "difference": None}}
        for metric, heldout in scored.items():
            before, after, change = heldout["before"], heldout["after"], heldout["difference"]
            interval = f"{change['mean']:+.3f} [{change['low']:+.3f}, {change['high']:+.3f}]" if change else "-"
            lines.append(
                f"{row['capability'][:28]:28s} {row['family'][:26]:26s} {metric.split('_')[0]:15s} "
                f"{'-' if before is None else f'{before:.3f}':>7s} "
                f"{'-' if after is None else f'{after:.3f}':>7s} {interval:>24s}  "
                f"{row['adapter'] or 'not trained (raise --max-adapters)'}"
            )
    for row in summary["adapters"]:
        if row["adapter"]:
            knobs = ", ".join(f"{name}={value}" for name, value in row["knobs"].items())
            lines.append(
                f"{row['capability']}: trained on {row['family']} at {knobs}"
                f"{' (calibrated)' if row['calibrated'] else ''}; "
                f"training reward per step: {Path(row['adapter']) / CURVE_FILE}"
            )
    if "arms" in summary:
        lines += [
            "",
            "held-out split, greedy: success and reward [95% interval], training rollouts",
            f"{'arm':40s} {'success':>22s} {'reward':>22s} {'rollouts':>9s}",
        ]
        for arm, m in summary["arms"].items():
            cells = [f"{m[k]['mean']:.3f} [{m[k]['low']:.3f}, {m[k]['high']:.3f}]" for k in ("success", "reward")]
            lines.append(f"{arm[:40]:40s} {cells[0]:>22s} {cells[1]:>22s} {m['rollouts']:>9d}")
        if "planted_gap" in summary:
            lines += ["", *format_gap(summary["planted_gap"])]
        lines.append(f"report: {summary['report']}")
    return "\n".join(lines)
