"""Agreement of the detectors with careful reading on trajectories they had never seen, round by round.

Each sampling round of labels/sample.json (2 onwards) was labelled after the detectors had been
tuned on the rounds before it. This script takes, for each round, the detectors as they stood in
the commit just before that round's labels entered labels/reference.json (rebuilt from git into a
temporary folder and run in a child process), and scores them (κ3 per capability, and κ of the
failure source over the failures) on that round's trajectories of one half (`--split tune` by
default): every item is scored by rules that had not seen it. Beside it, the
detectors of the working tree on the same items, which on the tune half were tuned on them. The gap
between the two is what per-item tuning bought that did not carry to unseen runs; the prequential
κ is an estimate of the test half's κ from the tune half alone. Only aggregates are printed.

    python benchmarks/prequential_agreement.py [--split tune|test] [--rounds 2-10]

Needs the repository's git history and ../shared/data (prints "skipped" without the data).
Time: about 10 s per round on 2 cores (ingest and detectors; the rebuild is a `git archive`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = "labels/reference.json"
WORKER = """
import json, sys
from pathlib import Path
from tracegym.analysis.attribution import attribute
from tracegym.analysis.detect_tau import detect
from tracegym.analysis.ingest import ingest_paths
paths = [Path(p) for p in json.loads(sys.argv[1])]
print(json.dumps({t.id: {**{name: verdict.value.value for name, verdict in detect(t).items()},
                         "failure_source": None if t.success else attribute(t).source}
                  for t in ingest_paths(paths).trajectories}))
"""


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout


def trajectory_id(entry: dict) -> str:
    return f"{Path(entry['run_file']).stem}/{entry['sim_id']}"


def label_commits(rounds: dict[str, int]) -> dict[int, str]:
    """For each round, the first commit whose labels/reference.json holds an entry of it."""
    first: dict[int, str] = {}
    for commit in git("log", "--reverse", "--format=%H", "--", REFERENCE).split():
        for entry in json.loads(git("show", f"{commit}:{REFERENCE}")):
            first.setdefault(rounds.get(trajectory_id(entry), 0), commit)
    return first


def build_package(commit: str, into: Path) -> Path:
    """The importable `tracegym` of `commit`, assembled under `into` as its pyproject maps it."""
    tree = into / "tree"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    mapping = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    root = into / "site"
    for package, folder in sorted(mapping.items(), key=lambda pf: pf[0].count(".")):
        shutil.copytree(tree / folder, root / package.replace(".", "/"), dirs_exist_ok=True)
    return root


def detector_values(site: Path | None, run_files: list[Path]) -> dict[str, dict[str, str]]:
    """{trajectory id: {capability: NA/PRESENT/LACKING, "failure_source": source or None for a success}} from the
    detectors of `site` (None: the working tree's)."""
    env = dict(os.environ, PYTHONPATH=str(site)) if site else dict(os.environ)
    done = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps([str(p) for p in run_files])],
        capture_output=True,
        text=True,
        env=env,
        cwd=site or REPO,
    )
    if done.returncode:
        raise RuntimeError(
            f"the detectors of {site or REPO} failed on {len(run_files)} run file(s):\n{done.stderr[-2000:]}"
        )
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from diagnosis_agreement import REFERENCE as REFERENCE_PATH
    from diagnosis_agreement import SAMPLE, bootstrap_kappas, data_root, interval, kappa

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--split", choices=("tune", "test"), default="tune", help="half of the reference (default tune)"
    )
    parser.add_argument(
        "--rounds", default="2-10", help="first-last sampling round (default 2-10; round 1 has no earlier rules)"
    )
    args = parser.parse_args(argv)
    bounds = args.rounds.split("-")
    if len(bounds) != 2 or not all(part.isdigit() for part in bounds) or int(bounds[0]) > int(bounds[1]):
        parser.error(f"--rounds takes FIRST-LAST, e.g. 2-10; got {args.rounds!r}")
    low, high = int(bounds[0]), int(bounds[1])
    results = data_root() / "tau2" / "results"
    if not results.is_dir():
        print(f"skipped: {results} is absent (set TRACEGYM_SHARED_DATA)")
        return 0
    rounds = {trajectory_id(e): e.get("round", 1) for e in json.loads(SAMPLE.read_text(encoding="utf-8"))}
    entries = [
        e
        for e in json.loads(REFERENCE_PATH.read_text(encoding="utf-8"))
        if e["split"] == args.split and low <= rounds[trajectory_id(e)] <= high
    ]
    names = list(entries[0]["labels"])
    commits = label_commits(rounds)
    unseen: list[tuple[dict, dict[str, str]]] = []  # (entry, values of the detectors that had not seen it)
    now: list[tuple[dict, dict[str, str]]] = []  # (entry, values of the working tree's detectors)
    print(f"{args.split} half, rounds {low}-{high}: each round scored by the detectors of the commit before its labels")
    print(f"{'round':<6} {'items':>5} {'rules of':>10}  " + " ".join(f"{n[:12]:>12}" for n in names))
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(low, high + 1):
            members = [e for e in entries if rounds[trajectory_id(e)] == round_]
            if not members or round_ not in commits:
                continue
            parent = git("rev-parse", f"{commits[round_]}^").strip()
            files = sorted({results / e["run_file"] for e in members})
            old = detector_values(build_package(parent, Path(scratch) / str(round_)), files)
            current = detector_values(None, files)
            unseen += [(e, old[trajectory_id(e)]) for e in members]
            now += [(e, current[trajectory_id(e)]) for e in members]
            values = [kappa([(e["labels"][n]["label"], old[trajectory_id(e)][n]) for e in members]) for n in names]
            print(
                f"{round_:<6} {len(members):>5} {parent[:10]:>10}  "
                + " ".join(f"{with_interval(v, None):>12}" for v in values)
            )
    print(
        f"pooled over {len(unseen)} items, κ3 with 95% bootstrap intervals over items: unseen rules | working tree | "
        "working tree - unseen (paired); then the unseen rules' errors"
    )
    for name in [*names, "failure_source"]:
        before = [(reference_value(e, name), v[name]) for e, v in unseen if reference_value(e, name)]
        after = [(reference_value(e, name), v[name]) for e, v in now if reference_value(e, name)]
        samples = bootstrap_kappas([before, after])
        parts = [
            (kappa(before), interval(samples[:, 0])),
            (kappa(after), interval(samples[:, 1])),
            (kappa(after) - kappa(before), interval(samples[:, 1] - samples[:, 0])),
        ]
        errors = Counter(pair for pair in before if pair[0] != pair[1])
        print(f"  {name:<28} " + " | ".join(with_interval(*part) for part in parts))
        print(f"  {'':<28} " + ", ".join(f"{a}->{b} {n}" for (a, b), n in sorted(errors.items())))
    return 0


def reference_value(entry: dict, name: str) -> str | None:
    """The reference's label of a capability, or its failure source (None for a success)."""
    return entry["failure_source"] if name == "failure_source" else entry["labels"][name]["label"]


def with_interval(value: float | None, bounds: tuple[float, float] | None) -> str:
    shown = "   –" if value is None else f"{value:+.2f}"
    return shown + (f" [{bounds[0]:+.2f}, {bounds[1]:+.2f}]" if bounds else "")


if __name__ == "__main__":
    sys.exit(main())
