"""Paired agreement with careful reading: one commit's detectors against the working tree's.

Both sets of detectors label the same trajectories of one half (`--split test` by default) and
are scored against today's labels/reference.json: κ3 per capability and κ of the failure source
over the failures, each with the other's, their difference and its 95% interval from a bootstrap
over trajectories resampled together for both (so a change is judged on the same items), and how
many items changed label. The commit's detectors are rebuilt from git into a temporary folder and
run in a child process (`prequential_agreement.build_package`). Only aggregates are printed.

    python benchmarks/paired_agreement.py BASE [--split tune|test]

Needs the repository's git history and ../shared/data (prints "skipped" without the data).
Time: about 30 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from diagnosis_agreement import REFERENCE, bootstrap_kappas, data_root, interval, kappa
    from prequential_agreement import build_package, detector_values, git, reference_value, trajectory_id, with_interval

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the commit whose detectors are compared with the working tree's")
    parser.add_argument(
        "--split", choices=("tune", "test"), default="test", help="half of the reference (default test)"
    )
    args = parser.parse_args(argv)
    try:
        base = git("rev-parse", "--verify", f"{args.base}^{{commit}}").strip()
    except subprocess.CalledProcessError:
        parser.error(f"{args.base!r} is not a commit of this repository")
    results = data_root() / "tau2" / "results"
    if not results.is_dir():
        print(f"skipped: {results} is absent (set TRACEGYM_SHARED_DATA)")
        return 0
    entries = [e for e in json.loads(REFERENCE.read_text(encoding="utf-8")) if e["split"] == args.split]
    files = sorted({results / e["run_file"] for e in entries})
    with tempfile.TemporaryDirectory() as scratch:
        before = detector_values(build_package(base, Path(scratch)), files)
    after = detector_values(None, files)
    print(
        f"{args.split} half ({len(entries)} items), today's labels: detectors of {base[:10]} | working tree | "
        "working tree - base (paired 95% interval), items that changed label"
    )
    for name in [*entries[0]["labels"], "failure_source"]:
        scored = [e for e in entries if reference_value(e, name)]
        old = [(reference_value(e, name), before[trajectory_id(e)][name]) for e in scored]
        new = [(reference_value(e, name), after[trajectory_id(e)][name]) for e in scored]
        samples = bootstrap_kappas([old, new])
        moved = sum(a != b for a, b in zip(old, new))
        print(
            f"  {name:<28} {with_interval(kappa(old), None)} | {with_interval(kappa(new), None)} | "
            f"{with_interval(kappa(new) - kappa(old), interval(samples[:, 1] - samples[:, 0]))}  {moved:>3} moved"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
