"""Agreement of the diagnosis with labels from careful reading (labels/reference.json), per half.

For the labelled τ²-bench trajectories (463 over ten sampling rounds, labels/README.md), on one
half of the split by task (`task_split` of labels/sample.json: every trajectory of a task in one
half; `--split test` by default, the labellers are tuned on `tune` only; `--by-trajectory` takes the
older halves dealt by trajectory, `split`, whose test trajectories mostly share a task with tune),
optionally only those of one sampling round (`--round N`, a round of labels/sample.json: each round
was drawn after the rules had been tuned on the rounds before it, so on the tune half a new round
measures how rules found on the earlier ones generalise), prints:
- Cohen's κ per capability between the labeller and the reference, 3-class (NA / PRESENT /
  LACKING, pooled with its 95% bootstrap interval over trajectories) and 2-class (LACKING vs not),
  pooled and per domain, with the 3-class confusion matrix;
- agreement on failure source (agent / user_simulator / benchmark) over the failures, with κ and its interval;
- whether the selected capability set equals the one the reference labels imply, per domain and
  overall: both go through the same `selection.select` (N = K = 1), the reference counting only
  the failures it attributes to the agent, as `diagnose` does by default.
Where labels/second_reading.json labelled some of the half's trajectories again (other readers, the
same protocol, without the first labels), it prints κ3 between the two readings beside the
labeller's with each: the agreement careful readers reach. With `--folds K` it also prints κ3 per
capability on each of K folds of the items grouped by run file (one agent's runs stay in one fold),
so that a rule fitted to one agent's habits shows as a fold far below the others. The labeller is
the deterministic detectors, or with `--judge-url URL` the LLM judge behind any OpenAI-compatible
endpoint (`--judge-model`, `--judge-api-key` or OPENAI_API_KEY, `--judge-runs`; `--judge-journal
FILE` keeps its answers so that a stopped run resumes; the selection passes reuse the answers of the
first). Message indices of evidence are
those of the τ² Results `messages[]` (ingest keeps them one to one). Only aggregates are printed;
`--items` lists per-trajectory disagreements and is refused on the test half, so that the detectors
are never tuned to its items.

With `--v1` it measures the fresh τ-bench v1 round instead (labels/tau_v1_reference.json, halves by
task from labels/tau_v1_sample.json, trajectories ingested from the v1 file in the data folder, ids
`<file stem>/<index>`): the same κ table, failure-source agreement and selection, with the bootstrap
intervals drawn over tasks rather than trajectories (trials of one task are not independent), and
no second reading, rounds or folds.

    python benchmarks/diagnosis_agreement.py [--split tune|test] [--by-trajectory] [--round N] [--folds K] [--items]
        [--judge-url URL [--judge-runs N] ...]
    python benchmarks/diagnosis_agreement.py --v1 [--split tune|test] [--items]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tracegym.analysis.catalogue import catalogue_for
from tracegym.analysis.contrast import task_key
from tracegym.analysis.diagnose import DiagnoseConfig, Diagnosis, diagnose
from tracegym.analysis.ingest import ingest_paths
from tracegym.analysis.judge import JudgeConfig, LLMJudge, connect
from tracegym.analysis.selection import Outcome, SelectionConfig, majority, select
from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.schema import Evidence, Label, LabelValue, Trajectory

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "labels" / "reference.json"
SAMPLE = REPO / "labels" / "sample.json"  # the draw: each entry's "round" (after round 1), halves "task_split", "split"
SECOND = REPO / "labels" / "second_reading.json"  # trajectories labelled again by other readers (old test half)
V1_REFERENCE = REPO / "labels" / "tau_v1_reference.json"  # the τ-bench v1 round's labels, by (file, index)
V1_SAMPLE = REPO / "labels" / "tau_v1_sample.json"  # its draw: each entry's "half" (by task)
VALUES = ("NA", "PRESENT", "LACKING")
SOURCES = ("agent", "user_simulator", "benchmark")
GOAL = 0.6  # κ per capability and on failure source (issue 11)


def data_root() -> Path:
    return Path(os.environ.get("TRACEGYM_SHARED_DATA") or REPO.parent / "shared" / "data")


def kappa(pairs: list[tuple[str, str]]) -> float | None:
    """Cohen's κ of (reference, labeller) pairs; None when chance agreement is 1 (one class only)."""
    if not pairs:
        return None
    total = len(pairs)
    observed = sum(a == b for a, b in pairs) / total
    first, second = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    expected = sum(first[c] * second[c] for c in first) / total**2
    return None if expected == 1 else (observed - expected) / (1 - expected)


def bootstrap_kappas(
    labellings: list[list[tuple[str, str]]], resamples: int = 2000, seed: int = 0, groups: list[str] | None = None
) -> np.ndarray:
    """κ of each labelling (equally long lists of (reference, labeller) pairs over the same items)
    on `resamples` resamples of the items with replacement, the same items for every labelling, so
    that a difference between labellings is paired: shape (resamples, labellings), NaN where a
    resample holds one class only. With `groups` (one key per item, e.g. its task) whole groups are
    resampled, every item of a drawn group coming with it (a cluster bootstrap)."""
    classes = sorted({value for pairs in labellings for pair in pairs for value in pair})
    code = {value: n for n, value in enumerate(classes)}
    k, items = len(classes), len(labellings[0])
    cells = np.array([[code[a] * k + code[b] for a, b in pairs] for pairs in labellings])  # (labellings, items)
    weights = _resample_weights(items, resamples, seed, groups)  # (resamples, items): times each item is drawn
    kappas = np.empty((resamples, len(labellings)))
    for column, row in enumerate(cells):
        counts = (weights @ np.eye(k * k)[row]).reshape(resamples, k, k) / weights.sum(axis=1)[:, None, None]
        observed = np.trace(counts, axis1=1, axis2=2)
        expected = (counts.sum(axis=2) * counts.sum(axis=1)).sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            kappas[:, column] = np.where(expected < 1, (observed - expected) / (1 - expected), np.nan)
    return kappas


def _resample_weights(items: int, resamples: int, seed: int, groups: list[str] | None) -> np.ndarray:
    """How often each of `items` items is drawn in each resample, shape (resamples, items): items
    drawn with replacement, or with `groups` the groups (numbered in order of first appearance) drawn
    with replacement, each bringing its items. Raises ValueError when `groups` is not one key per item."""
    if groups is not None and len(groups) != items:
        raise ValueError(f"{len(groups)} groups for {items} items")
    order = {} if groups is None else {key: n for n, key in enumerate(dict.fromkeys(groups))}  # first seen first
    member = np.arange(items) if groups is None else np.array([order[key] for key in groups], dtype=int)
    units = items if groups is None else len(order)
    drawn = np.random.default_rng(seed).integers(0, units, size=(resamples, units))
    times = np.zeros((resamples, units))
    np.add.at(times, (np.arange(resamples)[:, None], drawn), 1)
    return times[:, member]


def interval(samples: np.ndarray) -> tuple[float, float] | None:
    """The 95% percentile interval of bootstrap samples, NaNs left out (None when all are NaN)."""
    kept = samples[~np.isnan(samples)]
    return None if not len(kept) else (float(np.percentile(kept, 2.5)), float(np.percentile(kept, 97.5)))


def kappa_with_interval(pairs: list[tuple[str, str]], groups: list[str] | None = None) -> str:
    """κ and its 95% bootstrap interval over the items (over their `groups` when given, one key per
    pair), e.g. "+0.38 [+0.25, +0.50]"."""
    bounds = interval(bootstrap_kappas([pairs], groups=groups)[:, 0]) if pairs else None
    return _fmt(kappa(pairs)) + (f" [{_fmt(bounds[0])}, {_fmt(bounds[1])}]" if bounds else "")


def _fmt(value: float | None) -> str:
    return "   –" if value is None else f"{value:+.2f}"


@dataclass
class Item:
    """One labelled trajectory: its reference entry and the ingested trajectory."""

    entry: dict
    trajectory: Trajectory

    @property
    def domain(self) -> str:
        """The run file's domain folder (τ²), else the domain ingest read from the run (τ-bench v1)."""
        if "run_file" in self.entry:
            return self.entry["run_file"].split("/")[0]
        return self.trajectory.metadata.get("domain", "unknown")


def sample_rounds() -> dict[tuple[str, str], int]:
    """The sampling round of each drawn trajectory, by (run file, simulation id)."""
    return {(e["run_file"], e["sim_id"]): e.get("round", 1) for e in json.loads(SAMPLE.read_text(encoding="utf-8"))}


def sample_halves(by_task: bool = True) -> dict[tuple[str, str], str]:
    """The half ("tune" or "test") of each drawn trajectory, by (run file, simulation id): of the
    split by task (`task_split`), or with `by_task` False of the older split by trajectory (`split`)."""
    field = "task_split" if by_task else "split"
    return {(e["run_file"], e["sim_id"]): e[field] for e in json.loads(SAMPLE.read_text(encoding="utf-8"))}


def load_items(split: str, data: Path, round_: int | None = None, by_task: bool = True) -> list[Item]:
    """The reference entries on half `split` of the split by task (of the split by trajectory when
    `by_task` is False; of sampling round `round_` only, when given), each joined to its trajectory
    ingested from the run file."""
    rounds, halves = sample_rounds(), sample_halves(by_task)
    entries = [
        e
        for e in json.loads(REFERENCE.read_text(encoding="utf-8"))
        if halves[(e["run_file"], e["sim_id"])] == split and round_ in (None, rounds[(e["run_file"], e["sim_id"])])
    ]
    files = sorted({e["run_file"] for e in entries})
    trajectories = {t.id: t for t in ingest_paths([data / "tau2" / "results" / f for f in files]).trajectories}
    return [Item(e, trajectories[f"{Path(e['run_file']).stem}/{e['sim_id']}"]) for e in entries]


def load_v1_items(split: str, data: Path, reference: Path | None = None, sample: Path | None = None) -> list[Item]:
    """The τ-bench v1 round's reference entries (`reference`, default V1_REFERENCE) on half `split`
    of its draw (`sample`, default V1_SAMPLE: each entry's `half`, by (file, index)), in reference
    order, each joined to trajectory `<file stem>/<index>` ingested from `data`/file."""
    halves = {(e["file"], e["index"]): e["half"] for e in json.loads((sample or V1_SAMPLE).read_text(encoding="utf-8"))}
    entries = [
        e
        for e in json.loads((reference or V1_REFERENCE).read_text(encoding="utf-8"))
        if halves[(e["file"], e["index"])] == split
    ]
    files = sorted({e["file"] for e in entries})
    trajectories = {t.id: t for t in ingest_paths([data / f for f in files]).trajectories}
    return [Item(e, trajectories[f"{Path(e['file']).stem}/{e['index']}"]) for e in entries]


def reference_labels(items: list[Item]) -> list[Label]:
    """The reference as Label records (labeller "reference", run 0), evidence at the cited message."""
    return [
        Label(
            trajectory_id=item.trajectory.id,
            capability=name,
            value=LabelValue(verdict["label"]),
            evidence=[Evidence(message_index=verdict["msg_idx"], quote=verdict["quote"] or "")],
            labeller="reference",
        )
        for item in items
        for name, verdict in item.entry["labels"].items()
    ]


def reference_selection(items: list[Item]) -> list[str]:
    """The capabilities the reference labels select, counting successes and agent-caused failures."""
    outcomes = {
        i.trajectory.id: Outcome(task_key(i.trajectory), i.trajectory.success)
        for i in items
        if i.trajectory.success or i.entry["failure_source"] == "agent"
    }
    capabilities = catalogue_for({i.trajectory.source.benchmark for i in items})
    return select(capabilities, reference_labels(items), outcomes, SelectionConfig(bootstrap=0)).selected


def run_labeller(items: list[Item], judge: JudgeConfig, labeller: LLMJudge | None = None) -> Diagnosis:
    """`diagnose` over the items' trajectories: `labeller`'s labels (the judge `judge` configures)
    when given, else the deterministic detectors'. Raises JudgeError when the judge stops."""
    trajectories = [i.trajectory for i in items]
    inputs = sorted({Path(i.trajectory.source.file) for i in items})
    config = DiagnoseConfig(selection=SelectionConfig(bootstrap=0), judge=judge)
    return diagnose(trajectories, inputs, config, judge=labeller)


def voted_values(diagnosis: Diagnosis) -> dict[tuple[str, str], Label]:
    """The labeller's label per (trajectory, capability), by majority over its runs."""
    return majority(diagnosis.labels)


def labelled(voted: dict[tuple[str, str], Label], item: Item, name: str) -> str:
    """The labeller's value for one item and capability ("NA" where it gave none)."""
    label = voted.get((item.trajectory.id, name))
    return label.value.value if label else "NA"


def capability_agreement(
    items: list[Item], voted: dict[tuple[str, str], Label], names: list[str], by_task: bool = False
) -> list[str]:
    """Lines of the κ table (pooled and per domain) and the pooled confusion matrices; the pooled κ3's
    interval resamples trajectories, or with `by_task` tasks."""
    domains = sorted({i.domain for i in items})
    lines = [
        f"{'capability':<28} {'κ3 [95% interval]':>20} {'κ2':>6}   " + "  ".join(f"{d + ' κ3':>12}" for d in domains)
    ]
    matrices = []
    for name in names:
        pairs = {d: [] for d in domains}
        for item in items:
            pairs[item.domain].append((item.entry["labels"][name]["label"], labelled(voted, item, name)))
        pooled = [p for d in domains for p in pairs[d]]
        groups = [task_key(i.trajectory) for d in domains for i in items if i.domain == d] if by_task else None
        binary = [(a == "LACKING", b == "LACKING") for a, b in pooled]
        lines.append(
            f"{name:<28} {kappa_with_interval(pooled, groups):>20} {_fmt(kappa(binary)):>6}   "
            + "  ".join(f"{_fmt(kappa(pairs[d])):>12}" for d in domains)
        )
        counts = Counter(pooled)
        matrices.append(
            f"  {name}: reference rows NA/PRESENT/LACKING, labeller columns: "
            + " | ".join(" ".join(f"{counts[(a, b)]:>2}" for b in VALUES) for a in VALUES)
        )
    return lines + ["confusion matrices (3-class, pooled):"] + matrices


def reader_agreement(items: list[Item], voted: dict[tuple[str, str], Label], names: list[str]) -> list[str]:
    """κ3 per capability and failure-source κ between the reference and a second careful reading of
    the same trajectories (labels/second_reading.json), beside the labeller's κ3 with each reading:
    how far two careful readers agree bounds what a labeller can show. Empty where none is shared."""
    if not SECOND.is_file():
        return []
    second = {(e["run_file"], e["sim_id"]): e for e in json.loads(SECOND.read_text(encoding="utf-8"))}
    shared = [
        (i, second[(i.entry["run_file"], i.entry["sim_id"])])
        for i in items
        if (i.entry["run_file"], i.entry["sim_id"]) in second
    ]
    if not shared:
        return []
    lines = [f"second reading of {len(shared)} of these, κ3: reference-second, labeller-reference, labeller-second"]
    for name in names:
        reference = [i.entry["labels"][name]["label"] for i, _ in shared]
        other = [e["labels"][name]["label"] for _, e in shared]
        labeller = [labelled(voted, i, name) for i, _ in shared]
        lines.append(
            f"  {name:<28} "
            + "  ".join(
                f"{_fmt(kappa(list(zip(a, b)))):>6}"
                for a, b in ((reference, other), (labeller, reference), (labeller, other))
            )
        )
    sources = [(i.entry["failure_source"], e["failure_source"]) for i, e in shared if not i.trajectory.success]
    lines.append(
        f"  failure source, reference-second: {sum(a == b for a, b in sources)}/{len(sources)} agree, "
        f"κ {_fmt(kappa(sources))}"
    )
    return lines


def fold_agreement(items: list[Item], voted: dict[tuple[str, str], Label], names: list[str], folds: int) -> list[str]:
    """κ3 per capability on each of `folds` folds of the items, whole run files dealt to folds in
    turn from the largest (a fold with one class only shows –)."""
    files = Counter(i.entry["run_file"] for i in items)
    fold_of = {f: n % folds for n, (f, _) in enumerate(sorted(files.items(), key=lambda fc: (-fc[1], fc[0])))}
    members = [[i for i in items if fold_of[i.entry["run_file"]] == k] for k in range(folds)]
    lines = [f"{'folds by run file':<28} " + "  ".join(f"{f'fold {k} ({len(m)})':>12}" for k, m in enumerate(members))]
    for name in names:
        values = [kappa([(i.entry["labels"][name]["label"], labelled(voted, i, name)) for i in m]) for m in members]
        lines.append(f"{name:<28} " + "  ".join(f"{_fmt(v):>12}" for v in values))
    return lines


def evidence_located(items: list[Item], voted: dict[tuple[str, str], Label], names: list[str]) -> tuple[int, int]:
    """(LACKING agreements whose evidence cites the reader's message, LACKING agreements with a cited message)."""
    hits = total = 0
    for item in items:
        for name in names:
            reference, label = item.entry["labels"][name], voted.get((item.trajectory.id, name))
            if (
                reference["label"] == "LACKING"
                and reference["msg_idx"] is not None
                and label
                and label.value == LabelValue.LACKING
            ):
                total += 1
                hits += reference["msg_idx"] in {e.message_index for e in label.evidence}
    return hits, total


def source_agreement(items: list[Item], diagnosis: Diagnosis, by_task: bool = False) -> list[str]:
    """Agreement on failure source over the failures the reference gives one, κ's interval over
    trajectories or with `by_task` over tasks, and its confusion matrix."""
    failures = [i for i in items if not i.trajectory.success and i.entry["failure_source"]]
    pairs = [(i.entry["failure_source"], diagnosis.sources[i.trajectory.id].source) for i in failures]
    groups = [task_key(i.trajectory) for i in failures] if by_task else None
    counts = Counter(pairs)
    agreed = sum(a == b for a, b in pairs)
    return [
        f"failure source: {agreed}/{len(pairs)} agree, κ {kappa_with_interval(pairs, groups)}; reference rows "
        f"{'/'.join(SOURCES)}, labeller columns: "
        + " | ".join(" ".join(f"{counts[(a, b)]:>2}" for b in SOURCES) for a in SOURCES)
    ]


def selection_agreement(
    items: list[Item], judge: JudgeConfig, labeller: LLMJudge | None = None
) -> tuple[list[str], bool]:
    lines, all_match = [], True
    groups = {d: [i for i in items if i.domain == d] for d in sorted({i.domain for i in items})}
    for name, members in [*groups.items(), ("overall", items)]:
        selected = run_labeller(members, judge, labeller).report.selected
        reference = reference_selection(members)
        match = sorted(selected) == sorted(reference)
        all_match &= match
        lines.append(
            f"selection {name:<8} {'same' if match else 'DIFFERENT'}: labeller {sorted(selected)}, "
            f"reference {sorted(reference)}"
        )
    return lines, all_match


def item_lines(
    items: list[Item], diagnosis: Diagnosis, voted: dict[tuple[str, str], Label], names: list[str]
) -> list[str]:
    """Per-trajectory disagreements with the labeller's first evidence (tune half only)."""
    lines = []
    for number, item in enumerate(items):
        tid = item.trajectory.id
        source = diagnosis.sources.get(tid)
        head = f"[{number}] {tid} task {item.trajectory.task_id} reward {item.trajectory.reward}"
        if source and item.entry["failure_source"] and source.source != item.entry["failure_source"]:
            lines.append(
                f"{head} SOURCE reference {item.entry['failure_source']} labeller {source.source}: {source.reason}"
            )
        for name in names:
            label = voted.get((tid, name))
            reference = item.entry["labels"][name]["label"]
            if label and label.value.value != reference:
                shown = label.evidence[0] if label.evidence else None
                lines.append(
                    f"{head} {name}: reference {reference} labeller {label.value.value}"
                    + (f" [msg {shown.message_index}] {shown.quote[:160]}" if shown else "")
                )
    return lines


def measure_v1(split: str, data: Path, judge: JudgeConfig, items_wanted: bool = False) -> int:
    """Print the agreement on half `split` of the τ-bench v1 round: the κ table and failure-source
    agreement with intervals over tasks, evidence location, selection and, with `items_wanted` (tune
    half only), the per-trajectory disagreements. Returns the exit status (0)."""
    items = load_v1_items(split, data)
    labeller = connect(judge) if judge.url else None
    diagnosis = run_labeller(items, judge, labeller)
    voted = voted_values(diagnosis)
    names = list(items[0].entry["labels"])
    tasks = len({task_key(i.trajectory) for i in items})
    print(
        f"{split} half of the τ-bench v1 round (halves by task): {len(items)} trajectories "
        f"({sum(not i.trajectory.success for i in items)} failures) of {tasks} tasks, labeller "
        f"{diagnosis.report.params.get('labeller')}; 95% intervals: bootstrap over the {tasks} tasks"
    )
    lines = capability_agreement(items, voted, names, by_task=True)
    hits, total = evidence_located(items, voted, names)
    lines.append(f"evidence at the reader's message: {hits}/{total} LACKING agreements")
    lines += source_agreement(items, diagnosis, by_task=True) + selection_agreement(items, judge, labeller)[0]
    if items_wanted:
        lines += item_lines(items, diagnosis, voted, names)
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--split", choices=("tune", "test"), default="test", help="half of the reference (default test)"
    )
    parser.add_argument(
        "--by-trajectory",
        action="store_true",
        help="the older halves dealt by trajectory (sample.json `split`, sharing tasks) instead of by task",
    )
    parser.add_argument(
        "--round",
        type=int,
        choices=sorted(set(sample_rounds().values())),
        dest="round_",
        help="only the trajectories of this sampling round",
    )
    parser.add_argument(
        "--folds", type=int, default=0, help="also κ3 per capability on this many folds by run file (default 0: none)"
    )
    parser.add_argument("--items", action="store_true", help="list per-trajectory disagreements (tune half only)")
    parser.add_argument(
        "--v1",
        action="store_true",
        help="the fresh τ-bench v1 round (labels/tau_v1_reference.json, its halves by task) instead of the τ² "
        "reference; κ intervals resample tasks",
    )
    add_config_arguments(parser, JudgeConfig)
    args = parser.parse_args(argv)
    judge = resolve_config(JudgeConfig, args)
    if args.items and args.split != "tune":
        parser.error("--items is for the tune half only: the test half is read through aggregates")
    if args.v1 and (args.by_trajectory or args.round_ or args.folds):
        parser.error(
            "--v1 has its own halves by task, one round and one run file: no --by-trajectory, --round, --folds"
        )
    data = data_root()
    needed = (
        sorted({data / e["file"] for e in json.loads(V1_SAMPLE.read_text(encoding="utf-8"))})
        if args.v1
        else [data / "tau2" / "results"]
    )
    if missing := [str(path) for path in needed if not path.exists()]:
        print(f"skipped: {', '.join(missing)} is absent (set TRACEGYM_SHARED_DATA)")
        return 0
    if args.v1:
        return measure_v1(args.split, data, judge, args.items)
    items = load_items(args.split, data, args.round_, by_task=not args.by_trajectory)
    if not items:
        parser.error(
            f"{REFERENCE}: no labelled trajectories on the {args.split} half"
            + (f" of round {args.round_} (not merged yet?)" if args.round_ else "")
        )
    labeller = connect(judge) if judge.url else None  # asked once per question: later passes reuse its answers
    diagnosis = run_labeller(items, judge, labeller)
    voted = voted_values(diagnosis)
    names = list(items[0].entry["labels"])
    failures = sum(not i.trajectory.success for i in items)
    part = f" (round {args.round_})" if args.round_ else ""
    print(
        f"{args.split} half by {'trajectory' if args.by_trajectory else 'task'}{part}: {len(items)} trajectories "
        f"({failures} failures), labeller "
        f"{diagnosis.report.params.get('labeller')}"
    )
    for line in capability_agreement(items, voted, names):
        print(line)
    for line in reader_agreement(items, voted, names):
        print(line)
    if args.folds > 1:
        for line in fold_agreement(items, voted, names, args.folds):
            print(line)
    hits, total = evidence_located(items, voted, names)
    print(f"evidence at the reader's message: {hits}/{total} LACKING agreements")
    for line in source_agreement(items, diagnosis):
        print(line)
    lines, _ = selection_agreement(items, judge, labeller)
    for line in lines:
        print(line)
    if args.items:
        for line in item_lines(items, diagnosis, voted, names):
            print(line)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as error:  # the judge unreachable or refusing: one line, exit 1
        sys.exit(f"diagnosis_agreement: error: {error}")
