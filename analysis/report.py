"""Writes a Diagnosis: capabilities.json (the CapabilityReport), labels.jsonl, failure_sources.jsonl,
coverage_delta.png and report.md (tables, plot, per selected capability the failed tasks it
explains with quoted evidence, benchmark problems and the failure-source split). The five files
are replaced together (see tracegym.files)."""

from __future__ import annotations

from pathlib import Path
from typing import IO

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tracegym.analysis.diagnose import Diagnosis  # noqa: E402
from tracegym.files import replace_together  # noqa: E402
from tracegym.schema import CapabilityReport, CapabilityStats, dump_jsonl  # noqa: E402

EXPLAINED_SHOWN = 25  # failed tasks listed per selected capability in report.md
PLOT = "coverage_delta.png"
CAPABILITIES, LABELS, SOURCES, MARKDOWN = "capabilities.json", "labels.jsonl", "failure_sources.jsonl", "report.md"


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def plot_coverage_delta(report: CapabilityReport, path: Path | IO[bytes]) -> None:
    """Scatter of mean coverage against mean Δ, selected capabilities filled, thresholds dashed."""
    figure, axes = plt.subplots(figsize=(7, 5))
    for stats in report.capabilities:
        cov, delta = _mean(stats.cov), stats.delta_mean
        if delta is None or cov is None:
            continue
        axes.scatter(cov, delta, s=60, color="tab:red" if stats.selected else "white", edgecolors="tab:red", zorder=3)
        if stats.delta_ci:
            axes.plot([cov, cov], stats.delta_ci, color="tab:gray", linewidth=1)
        axes.annotate(stats.capability.name, (cov, delta), textcoords="offset points", xytext=(5, 4), fontsize=8)
    axes.axvline(report.params.get("rho", 0.1), linestyle="--", color="tab:blue", linewidth=1)
    axes.axhline(report.params.get("delta", 0.2), linestyle="--", color="tab:blue", linewidth=1)
    axes.set_xlabel("coverage of agent-caused failures (Cov)")
    axes.set_ylabel("Δ = ER− − ER+ (bars: 95% task-bootstrap interval)")
    axes.set_title("Capabilities: coverage vs contrast (filled = selected)")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120, format="png")
    plt.close(figure)


def _capability_table(report: CapabilityReport) -> list[str]:
    lines = ["| capability | Cov | ER− | ER+ | Δ | Δ 95% CI | paired Δ (tasks) | runs passed | selected |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in sorted(report.capabilities, key=lambda s: -(s.delta_mean if s.delta_mean is not None else -9)):
        ci = f"[{s.delta_ci[0]:.2f}, {s.delta_ci[1]:.2f}]" if s.delta_ci else "–"
        lines.append(f"| {s.capability.name} | {_fmt(_mean(s.cov))} | {_fmt(_mean(s.er_minus))} | {_fmt(_mean(s.er_plus))} "
                     f"| {_fmt(s.delta_mean)} | {ci} | {_fmt(s.paired_delta)} ({s.paired_tasks}) | {s.runs_passed}/"
                     f"{report.params.get('n', 1)} | {'yes' if s.selected else 'no'} |")
    return lines


def _quote(item: dict) -> str:
    shown = []
    evidence = item.get("evidence") or []
    for entry in evidence[:1] + [e for e in evidence[1:] if e.get("message_index") is not None][:1]:
        where = f"msg {entry['message_index']}" if entry.get("message_index") is not None else "verdict"
        shown.append(f"[{where}] “{entry['quote']}”")
    return " / ".join(shown) or "(no evidence recorded)"


def _explained(stats: CapabilityStats) -> list[str]:
    lines = [f"### {stats.capability.name}", "", stats.capability.description, "",
             f"Explains {len(stats.explained_failures)} agent-caused failures:", ""]
    for item in stats.explained_failures[:EXPLAINED_SHOWN]:
        lines.append(f"- task `{item['task_id']}` (`{item['trajectory_id']}`): {_quote(item)}")
    if len(stats.explained_failures) > EXPLAINED_SHOWN:
        lines.append(f"- … and {len(stats.explained_failures) - EXPLAINED_SHOWN} more (capabilities.json lists all)")
    return lines + [""]


def render_markdown(diagnosis: Diagnosis) -> str:
    report = diagnosis.report
    trajectories = diagnosis.trajectories
    failures = sum(not t.success for t in trajectories)
    by_name = {s.capability.name: s for s in report.capabilities}
    lines = [
        "# Capability diagnosis", "",
        f"Inputs: {', '.join(report.inputs)}", "",
        f"{len(trajectories)} trajectories, {len(trajectories) - failures} successes, {failures} failures; "
        f"{len(diagnosis.contrasts)} tasks have both outcomes. Labeller: {report.params.get('labeller')}; "
        f"ρ = {report.params.get('rho')}, δ = {report.params.get('delta')}, K = {report.params.get('k')} of "
        f"N = {report.params.get('n')}.", "",
        "## Failure sources", "",
        "| source | failures |", "|---|---|",
        *[f"| {name} | {count} |" for name, count in report.failure_sources.items()], "",
        f"Statistics count {report.params.get('counted_failures')} failures "
        f"({'all' if report.params.get('count_all_failures') else 'agent-caused only'}) and "
        f"{report.params.get('counted_successes')} successes.", "",
        "## Capabilities", "", *_capability_table(report), "",
        f"Selected (by mean Δ): {', '.join(report.selected) or 'none'}. "
        f"Union coverage of the selected set: {_fmt(report.union_coverage)}.", "",
        f"![coverage vs delta]({PLOT})", "",
        "## Failed tasks explained by each selected capability", "",
    ]
    for name in report.selected:
        lines += _explained(by_name[name])
    lines += ["## Possible benchmark errors", "",
              "Failures explained by a corrected gold action are attributed to the benchmark and left out of the "
              "statistics; tasks that fail for every agent are listed for review and still counted.", ""]
    lines += [f"- `{e['task']}`: {e['reason']}" + (f" ({e['failures_attributed_to_benchmark']} failures attributed)"
              if "failures_attributed_to_benchmark" in e else f" ({e['runs']} runs, {len(e['agents'])} agents)")
              for e in report.possible_benchmark_errors] or ["- none found"]
    others = [s for s in diagnosis.sources.values() if s.source != "agent"]
    lines += ["", "## Failures not caused by the agent", ""]
    lines += [f"- `{s.trajectory_id}` → {s.source} ({s.method}): {s.reason}"
              + (f" [msg {s.evidence.message_index}] “{s.evidence.quote}”" if s.evidence else "")
              for s in others[:40]] or ["- none"]
    if len(others) > 40:
        lines.append(f"- … and {len(others) - 40} more (failure_sources.jsonl lists all)")
    if diagnosis.proposed:
        lines += ["", "## Proposed capabilities (new, deduplicated against the catalogue)", ""]
        lines += [f"- **{c.name}**: {c.description} (examples: {', '.join(c.examples)})" for c in diagnosis.proposed]
    if "judge" in report.params:
        judge = report.params["judge"]
        lines += ["", "## LLM judge", "", f"Model `{judge['model']}`, {judge['runs']} runs at T = {judge['temperature']}.",
                  "", "| step | calls | retried | malformed (counted, unlabelled) |", "|---|---|---|---|"]
        lines += [f"| {step} | {judge.get(step + '_calls')} | {judge.get(step + '_retried')} | {judge.get(step + '_malformed')} |"
                  for step in ("labels", "attribution") if step + "_calls" in judge]
        lines += ["", "Prompt:", "", "```", judge["prompt"], "```"]
    return "\n".join(lines) + "\n"


def write_outputs(diagnosis: Diagnosis, out_dir: Path) -> Path:
    """Replace every output file in `out_dir` (created) together; returns the path of report.md."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with replace_together(out_dir, (CAPABILITIES, LABELS, SOURCES, PLOT, MARKDOWN)) as outputs:
        outputs.write_text(CAPABILITIES, diagnosis.report.model_dump_json(indent=2))
        with outputs.open(LABELS) as handle:
            dump_jsonl(diagnosis.labels, handle)
        with outputs.open(SOURCES) as handle:
            dump_jsonl(diagnosis.sources.values(), handle)
        with outputs.open(PLOT, binary=True) as handle:
            plot_coverage_delta(diagnosis.report, handle)
        outputs.write_text(MARKDOWN, render_markdown(diagnosis))
    return out_dir / MARKDOWN
