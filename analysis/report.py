"""Writes a Diagnosis: capabilities.json (the CapabilityReport), labels.jsonl, failure_sources.jsonl,
coverage_delta.png and report.md (what reading the inputs repaired and skipped, tables, the plot,
per selected capability the failed tasks it explains with whole evidence quotes, benchmark problems
and the failures not caused by the agent grouped by reason). The five files are replaced together
(see tracegym.files)."""

from __future__ import annotations

from pathlib import Path
from typing import IO

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Annotation, Text  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from tracegym.analysis.diagnose import Diagnosis  # noqa: E402
from tracegym.analysis.rules.domain import GENERIC  # noqa: E402
from tracegym.analysis.rules.registry import domain_uses  # noqa: E402
from tracegym.files import replace_together  # noqa: E402
from tracegym.schema import CapabilityReport, CapabilityStats, dump_jsonl  # noqa: E402

EXPLAINED_SHOWN = 25  # failed tasks listed per selected capability in report.md
SOURCES_SHOWN = 40  # failures listed per (source, reason) group in report.md
PLOT = "coverage_delta.png"
CAPABILITIES, LABELS, SOURCES, MARKDOWN = "capabilities.json", "labels.jsonl", "failure_sources.jsonl", "report.md"


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def coverage_delta_figure(report: CapabilityReport) -> Figure:
    """Scatter of mean coverage against mean Δ, selected capabilities filled, thresholds dashed,
    each point named by a label that overlaps no other label (see `_separate`)."""
    figure, axes = plt.subplots(figsize=(7, 5))
    labels = []
    for stats in report.capabilities:
        cov, delta = _mean(stats.cov), stats.delta_mean
        if delta is None or cov is None:
            continue
        axes.scatter(cov, delta, s=60, color="tab:red" if stats.selected else "white", edgecolors="tab:red", zorder=3)
        if stats.delta_ci:
            axes.plot([cov, cov], stats.delta_ci, color="tab:gray", linewidth=1)
        labels.append(
            axes.annotate(
                stats.capability.name,
                (cov, delta),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=8,
                arrowprops={"arrowstyle": "-", "color": "tab:gray", "linewidth": 0.5},
            )
        )
    axes.axvline(report.params.get("rho", 0.1), linestyle="--", color="tab:blue", linewidth=1)
    axes.axhline(report.params.get("delta", 0.2), linestyle="--", color="tab:blue", linewidth=1)
    axes.set_xlabel("coverage of agent-caused failures (Cov)")
    axes.set_ylabel("Δ = ER− − ER+ (bars: 95% task-bootstrap interval)")
    axes.set_title("Capabilities: coverage vs contrast (filled = selected)")
    axes.grid(alpha=0.3)
    axes.margins(x=0.2, y=0.1)  # room for the labels right of the rightmost points
    figure.tight_layout()
    _separate(figure, labels)
    return figure


def _separate(figure: Figure, labels: list, gap: float = 2.0) -> None:
    """Move labels down, highest first, until none overlaps a label placed before it (offsets in
    points; `gap` points kept between labels)."""
    renderer = figure.canvas.get_renderer()
    placed = []
    for label in sorted(labels, key=lambda a: -text_box(a, renderer).y0):
        box = text_box(label, renderer)
        while any(box.overlaps(other) for other in placed):
            x, y = label.xyann
            label.xyann = (x, y - (box.height + gap) * 72 / figure.dpi)
            box = text_box(label, renderer)
        placed.append(box)


def text_box(label: Annotation, renderer) -> Bbox:
    """The display box of a label's text alone (an annotation's own box includes its connector line)."""
    return Text.get_window_extent(label, renderer)


def plot_coverage_delta(report: CapabilityReport, path: Path | IO[bytes]) -> None:
    """Write `coverage_delta_figure` as a PNG."""
    figure = coverage_delta_figure(report)
    figure.savefig(path, dpi=120, format="png")
    plt.close(figure)


def _capability_table(report: CapabilityReport) -> list[str]:
    lines = [
        "| capability | Cov | ER− | ER+ | Δ | Δ 95% CI | paired Δ (tasks) | runs passed | selected |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sorted(report.capabilities, key=lambda s: -(s.delta_mean if s.delta_mean is not None else -9)):
        ci = f"[{s.delta_ci[0]:.2f}, {s.delta_ci[1]:.2f}]" if s.delta_ci else "–"
        lines.append(
            f"| {s.capability.name} | {_fmt(_mean(s.cov))} | {_fmt(_mean(s.er_minus))} | {_fmt(_mean(s.er_plus))} "
            f"| {_fmt(s.delta_mean)} | {ci} | {_fmt(s.paired_delta)} ({s.paired_tasks}) | {s.runs_passed}/"
            f"{report.params.get('n', 1)} | {'yes' if s.selected else 'no'} |"
        )
    return lines


def selection_table(report: CapabilityReport) -> str:
    """The selection table printed to the terminal (`tracegym diagnose`, and `tracegym run`'s analysis stage)."""
    lines = [f"{'capability':<30} {'Cov':>5} {'Δ':>6} {'Δ 95% CI':>15} {'paired':>7} {'pass':>5}  selected", "-" * 82]
    for s in report.capabilities:
        cov = _fmt(_mean(s.cov))
        delta = f"{s.delta_mean:+.2f}" if s.delta_mean is not None else "–"
        ci = f"[{s.delta_ci[0]:+.2f},{s.delta_ci[1]:+.2f}]" if s.delta_ci else "–"
        paired = f"{s.paired_delta:+.2f}" if s.paired_delta is not None else "–"
        lines.append(
            f"{s.capability.name:<30} {cov:>5} {delta:>6} {ci:>15} {paired:>7} "
            f"{s.runs_passed:>2}/{report.params['n']:<2}  "
            f"{'yes' if s.selected else 'no'}"
        )
    sources = ", ".join(f"{k} {v}" for k, v in report.failure_sources.items())
    lines.append(
        f"failure sources: {sources}; union coverage of selected: {report.union_coverage:.2f}"
        if report.union_coverage is not None
        else f"failure sources: {sources}"
    )
    return "\n".join(lines)


def _where(index: int | None) -> str:
    return f"msg {index}" if index is not None else "run"


def _quote(item: dict) -> str:
    """Every evidence item kept for an explained failure, whole, with the message it cites."""
    shown = [f"[{_where(e.get('message_index'))}] “{e['quote']}”" for e in item.get("evidence") or []]
    return " / ".join(shown) or "(no evidence recorded)"


def _inputs(diagnosis: Diagnosis) -> list[str]:
    """What reading the inputs repaired, kept as inconsistent, skipped and ignored: every item."""
    ingest = diagnosis.ingest
    if ingest is None:
        return ["## Reading the inputs", "", "- not recorded (trajectories passed in directly)", ""]
    repaired = [i for i in ingest.inconsistencies if i.repaired]
    kept = [i for i in ingest.inconsistencies if not i.repaired]
    lines = [
        "## Reading the inputs",
        "",
        "| source | format | runs | successes | failures | skipped | repaired |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {s.path} | {s.format} | {s.runs} | {s.successes} | {s.failures} | {s.skipped} | {s.repaired} |"
        for s in ingest.sources
    ]
    for title, items in (
        (f"Repairs made while reading ({len(repaired)})", repaired),
        (f"Inconsistencies kept as recorded ({len(kept)})", kept),
    ):
        lines += ["", f"{title}:", ""] + (["- none"] if not items else [])
        for path in dict.fromkeys(i.path for i in items):
            lines += [f"- in {path}:"] + [f"  - {', '.join(i.records)}: {i.message}" for i in items if i.path == path]
    lines += ["", f"Skipped records ({len(ingest.skipped)}):", ""]
    lines += [f"- {r.path}: {r.json_path or '(whole file)'}: {r.reason}" for r in ingest.skipped] or ["- none"]
    if ingest.ignored:
        lines += ["", f"Files that are not runs, ignored ({len(ingest.ignored)}):", ""]
        lines += [f"- {r.path}: {r.reason}" for r in ingest.ignored]
    return lines + [""]


def domain_lines(diagnosis: Diagnosis) -> list[str]:
    """Per domain of the τ-style runs, which rules labelled them: a registered domain (where it was
    declared, and the rules skipped because no run's policy holds their sentence), or the generic
    checks. [] where there are no τ-style runs."""
    lines = []
    for use in domain_uses(diagnosis.trajectories):
        name = f"`{use.name}`" if use.name else "(no domain recorded)"
        if use.domain is GENERIC:
            lines.append(
                f"- {name}, {use.runs} runs: no rules registered for this domain, so the generic checks applied "
                "(writes guessed from tool-name verbs, no confirmation rule, no record reads checked); register "
                "the domain's rules with `--domain FILE`"
            )
            continue
        rules = len(use.domain.sentences())
        lines.append(
            f"- {name}, {use.runs} runs: the domain's rules ({rules} policy sentences) from {use.domain.origin}"
        )
        lines += [f"  - not applied, no run's policy holds: “{sentence}”" for sentence in use.unapplied]
    return ["## Domain rules", "", *lines, ""] if lines else []


def _not_the_agents(diagnosis: Diagnosis) -> list[str]:
    """Failures attributed to the user simulator or the benchmark, grouped by source and reason."""
    groups: dict[tuple[str, str], list] = {}
    for found in diagnosis.sources.values():
        if found.source != "agent":
            groups.setdefault((found.source, found.reason), []).append(found)
    lines = ["## Failures not caused by the agent", ""]
    if not groups:
        return lines + ["- none", ""]
    for (source, reason), members in sorted(groups.items(), key=lambda g: (g[0][0], -len(g[1]))):
        lines += [f"### {source}: {reason} ({len(members)})", ""]
        lines += [
            f"- `{m.trajectory_id}` ({m.method})"
            + (f": [{_where(m.evidence.message_index)}] “{m.evidence.quote}”" if m.evidence else "")
            for m in members[:SOURCES_SHOWN]
        ]
        if len(members) > SOURCES_SHOWN:
            lines.append(f"- … and {len(members) - SOURCES_SHOWN} more (failure_sources.jsonl lists all)")
        lines.append("")
    return lines


def _explained(stats: CapabilityStats) -> list[str]:
    lines = [
        f"### {stats.capability.name}",
        "",
        stats.capability.description,
        "",
        f"Explains {len(stats.explained_failures)} agent-caused failures:",
        "",
    ]
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
        "# Capability diagnosis",
        "",
        f"Inputs: {', '.join(report.inputs)}",
        "",
        f"{len(trajectories)} trajectories, {len(trajectories) - failures} successes, {failures} failures; "
        f"{len(diagnosis.contrasts)} tasks have both outcomes. Labeller: {report.params.get('labeller')}; "
        f"ρ = {report.params.get('rho')}, δ = {report.params.get('delta')}, K = {report.params.get('k')} of "
        f"N = {report.params.get('n')}.",
        "",
        *domain_lines(diagnosis),
        *_inputs(diagnosis),
        "## Failure sources",
        "",
        "| source | failures |",
        "|---|---|",
        *[f"| {name} | {count} |" for name, count in report.failure_sources.items()],
        "",
        f"Statistics count {report.params.get('counted_failures')} failures "
        f"({'all' if report.params.get('count_all_failures') else 'agent-caused only'}) and "
        f"{report.params.get('counted_successes')} successes.",
        "",
        "## Capabilities",
        "",
        *_capability_table(report),
        "",
        f"Selected (by mean Δ): {', '.join(report.selected) or 'none'}. "
        f"Union coverage of the selected set: {_fmt(report.union_coverage)}.",
        "",
        f"![coverage vs delta]({PLOT})",
        "",
        "## Failed tasks explained by each selected capability",
        "",
    ]
    for name in report.selected:
        lines += _explained(by_name[name])
    lines += [
        "## Possible benchmark errors",
        "",
        "Failures whose gold action breaks the run's own policy are attributed to the benchmark and left out "
        "of the statistics (grouped by task below); tasks that fail for every agent are listed for review and "
        "still counted.",
        "",
    ]
    lines += [
        f"- `{e['task']}`: {e['reason']}"
        + (
            f" ({e['failures_attributed_to_benchmark']} failures attributed): {e.get('evidence', '')}"
            if "failures_attributed_to_benchmark" in e
            else f" ({e['runs']} runs, {len(e['agents'])} agents)"
        )
        for e in report.possible_benchmark_errors
    ] or ["- none found"]
    lines += [""] + _not_the_agents(diagnosis)
    if diagnosis.proposed:
        lines += ["", "## Proposed capabilities (new, deduplicated against the catalogue)", ""]
        lines += [f"- **{c.name}**: {c.description} (examples: {', '.join(c.examples)})" for c in diagnosis.proposed]
    if "judge" in report.params:
        judge = report.params["judge"]
        lines += [
            "",
            "## LLM judge",
            "",
            f"Model `{judge['model']}`, {judge['runs']} runs at T = {judge['temperature']}.",
            "",
            "| step | calls | retried | malformed (counted, unlabelled) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {step} | {judge.get(step + '_calls')} | {judge.get(step + '_retried')} "
            f"| {judge.get(step + '_malformed')} |"
            for step in ("labels", "attribution")
            if step + "_calls" in judge
        ]
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
