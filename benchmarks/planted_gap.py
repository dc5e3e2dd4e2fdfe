"""Does the loop find a planted capability gap and close it on held-out target tasks? (issue 44)

Protocol (written before the run; docs/results.md, "Planted gaps"): for each planted gap, the loop
(`tracegym run --config configs/planted_gap.toml --base-agent-gap GAP`) warm-starts a base agent
whose demonstrations show that capability's characteristic mistake in the kinds exercising it, and
beside it the same warm start without the gap (the ceiling, arm `base_nogap`); samples the gapped
agent's train-split runs; diagnoses them; trains an adapter per selected capability on its
synthetic family, the token router over them and the task router; trains plain GRPO on the
target's train split with at least the adapters' GRPO rollouts; and plays every arm greedily on
the same held-out tasks. The figure judged: mixture − base in held-out success, paired by task,
with its 95% interval; beside it mixture − plain GRPO, and the per-link figures of
`tracegym.eval.gap_figures` that locate a failure (selection, the gap itself, each adapter on its
own family and on the target's gap kinds, the routing).

Before the models, the same gaps are played by scripted agents (the oracle, with the planted
capability's characteristic mistake in 80% of the episodes of its kinds; `eval.target.planted`) and
diagnosed in seconds: recall and precision of the selection per capability (`scripted` in the
result file; `--scripted-only` stops there).

Every gap runs in its own run directory under `--out` (default runs/planted_gap/GAP): rerunning the
command skips finished stages and resumes an interrupted one, so the experiment can run across
sessions. Each gap is taken through its diagnosis first; then the no-gap base agent and its
held-out arm, the same for every gap of one config, are copied from another gap's run directory
that has them (`share_nogap`) before the rest of the loop runs. The figures are printed and written
to `--result` (default benchmarks/results/planted_gap.json) with the commit that ran them, after
each gap.

    python benchmarks/planted_gap.py [--gaps G1,G2] [--config FILE] [--out DIR] [--result FILE]
    python benchmarks/planted_gap.py --scripted-only   # the model-free diagnosis check alone, seconds
    python benchmarks/planted_gap.py --stop-after analysis  # each gap's diagnosis first, then carry on
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tracegym.analysis.diagnose import diagnose
from tracegym.config import config_dict
from tracegym.eval.config import RunConfig
from tracegym.eval.gap_figures import format_gap, gap_figures
from tracegym.eval.rundir import RunDirectory, config_differences
from tracegym.eval.target import TargetConfig
from tracegym.eval.target.kinds import GAP_CAPABILITIES
from tracegym.eval.target.planted import planted_runs, write_planted_runs
from tracegym.schema import read_jsonl

REPO = Path(__file__).resolve().parents[1]
DEFAULT_GAPS = ("precondition_verification", "multi_step_task_completion")  # each has its own family


def commit() -> str:
    """The checkout's commit, with `+dirty` when its tracked files differ from it (the result files aside)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    status = ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results"]
    dirty = subprocess.run(status, cwd=REPO, capture_output=True)
    return head + ("+dirty" if dirty.stdout.strip() else "")


def scripted_selection(trials: int = 2, slip_rate: float = 0.8) -> dict[str, dict[str, object]]:
    """Per plantable capability: what the diagnosis selects on the scripted gapped agent's runs of the
    default train split, with recall and precision against the planted capability."""
    figures = {}
    with tempfile.TemporaryDirectory() as scratch:
        for gap in GAP_CAPABILITIES:
            records = planted_runs(TargetConfig(), gap, trials=trials, slip_rate=slip_rate, seed=0)
            _, trajectories = write_planted_runs(records, Path(scratch) / gap, TargetConfig(), gap)
            selected = diagnose(list(read_jsonl(trajectories)), [trajectories]).report.selected
            hit = float(gap in selected)
            precision = hit / len(selected) if selected else None
            figures[gap] = {"selected": selected, "recall": hit, "precision": precision}
            shown = "-" if precision is None else f"{precision:.2f}"
            print(f"scripted {gap:28s} selected {', '.join(selected) or 'none'}: recall {hit:.0f}, precision {shown}")
    return figures


def run_gap(gap: str, config: Path, out: Path, stop_after: str | None, others: list[Path]) -> float:
    """Run (or resume) the loop with `gap` planted into `out`, up to `stop_after` when given, taking
    the no-gap stages from one of the `others` gaps' run directories where it has them; returns the
    wall seconds of this call."""
    started = time.perf_counter()
    command = [sys.executable, "-m", "tracegym.cli", "run", "--config", str(config), "--base-agent-gap", gap]
    subprocess.run([*command, "--out", str(out), "--stop-after", "analysis"], check=True)
    if stop_after is None:
        share_nogap(out, others)
        subprocess.run([*command, "--out", str(out)], check=True)
    return time.perf_counter() - started


def share_nogap(run: Path, others: list[Path]) -> None:
    """Copy the no-gap base agent and its held-out arm into `run` from the first of `others` made
    with the same config but for the planted gap: the same warm start on the same dialogues and the
    same held-out tasks give the same agent and episodes, so each gap need not pay for them again."""
    mine = json.loads((run / "run.json").read_text())["config"]
    defaults = config_dict(RunConfig())
    directory = RunDirectory(run, mine, defaults=defaults)
    if directory.is_complete("base_agent_nogap"):
        return
    for other in others:
        try:
            theirs = json.loads((other / "run.json").read_text())["config"]
        except (OSError, ValueError, KeyError):
            continue
        if config_differences(without_gap(theirs), without_gap(mine), defaults):
            continue
        if directory.adopt_stage(other, "base_agent_nogap"):
            shared = ["base_agent_nogap"] + ["eval/base_nogap"] * directory.adopt_stage(other, "eval/base_nogap")
            print(f"{run.name}: {', '.join(shared)} taken from {other}", flush=True)
            return


def without_gap(config: dict) -> dict:
    """A run's stored config with its planted gap left out."""
    return {**config, "base_agent": {k: v for k, v in config.get("base_agent", {}).items() if k != "gap"}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gaps", default=",".join(DEFAULT_GAPS), help="planted capabilities, comma-separated")
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "planted_gap.toml")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "planted_gap")
    parser.add_argument("--result", type=Path, default=REPO / "benchmarks" / "results" / "planted_gap.json")
    parser.add_argument("--scripted-only", action="store_true", help="only the model-free diagnosis check")
    parser.add_argument(
        "--stop-after",
        choices=("analysis",),
        help="every gap up to its diagnosis first (selection figures only); rerun without it to carry on",
    )
    args = parser.parse_args()
    result = json.loads(args.result.read_text()) if args.result.is_file() else {"gaps": {}}
    result["scripted"] = {"commit": commit(), "trials": 2, "slip_rate": 0.8, "gaps": scripted_selection()}
    args.result.parent.mkdir(parents=True, exist_ok=True)
    args.result.write_text(json.dumps(result, indent=1))
    if args.scripted_only:
        print(f"wrote {args.result}")
        return 0
    for gap in [g for g in args.gaps.split(",") if g]:
        others = [args.out / other for other in GAP_CAPABILITIES if other != gap]
        seconds = run_gap(gap, args.config, args.out / gap, args.stop_after, others)
        figures = gap_figures(args.out / gap, gap)
        result["gaps"][gap] = {**figures, "commit": commit(), "config": str(args.config.resolve().relative_to(REPO))}
        result["gaps"][gap]["last_call_seconds"] = round(seconds, 1)
        args.result.write_text(json.dumps(result, indent=1))
        print("\n".join(format_gap(figures)[: 1 if args.stop_after else None]), flush=True)
    print(f"wrote {args.result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
