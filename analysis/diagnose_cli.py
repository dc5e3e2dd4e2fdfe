"""`tracegym diagnose PATH... --out DIR`: find the capabilities an agent lacks, with evidence.

PATHs are run files or folders (anything `tracegym ingest` reads, including a trajectories.jsonl
it wrote). Writes capabilities.json, report.md, coverage_delta.png, labels.jsonl and
failure_sources.jsonl into DIR, replaced together (see tracegym.files), and prints the selection
table. With --keep-going bad records are skipped and listed; inputs holding no trajectory leave
DIR as it was (exit 1) unless --allow-empty.
Without --judge-url the deterministic detectors label (N = K = 1); with it, the judge labels in
--judge-runs runs and K defaults to 80% of them (the paper's 8 of 10).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from tracegym.analysis.diagnose import Diagnosis, attach_gold_patches, diagnose
from tracegym.analysis.ingest import IngestError, ingest_paths
from tracegym.analysis.ingest.outputs import empty_input, format_skipped
from tracegym.analysis.judge import LLMJudge
from tracegym.analysis.llm_client import OpenAIChatClient
from tracegym.analysis.report import write_outputs
from tracegym.analysis.selection import SelectionConfig
from tracegym.errors import UserError
from tracegym.files import writing_into
from tracegym.schema import Trajectory


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("diagnose", help="contrastive capability diagnosis of agent runs")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="run files/folders or an ingested trajectories.jsonl")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--keep-going", action="store_true", help="skip bad input records (listed) instead of stopping")
    parser.add_argument("--allow-empty", action="store_true", help="write empty outputs when the inputs hold no trajectory (default: exit 1, outputs kept)")
    parser.add_argument("--judge-url", help="OpenAI-compatible API base, e.g. http://127.0.0.1:8000/v1 (key: OPENAI_API_KEY)")
    parser.add_argument("--judge-model", default="judge", help="model name sent to the judge endpoint")
    parser.add_argument("--judge-runs", type=int, default=10, help="independent judge labelling runs N (default 10)")
    parser.add_argument("--judge-retries", type=int, default=2, help="retries of a malformed judge answer (default 2)")
    parser.add_argument("--judge-workers", type=int, default=4, help="concurrent judge requests (default 4)")
    parser.add_argument("--propose", action="store_true", help="ask the judge model to propose new capabilities")
    parser.add_argument("--rho", type=float, default=0.10, help="minimum coverage ρ (default 0.10)")
    parser.add_argument("--delta", type=float, default=0.20, help="minimum Δ δ (default 0.20)")
    parser.add_argument("--k", type=int, default=None, help="runs that must pass (default: 1 deterministic, 80%% of N judged)")
    parser.add_argument("--n", type=int, default=None, help="labelling runs expected (default: 1 deterministic, --judge-runs)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples over tasks (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--count-all-failures", action="store_true", help="count user-simulator and benchmark failures too")
    parser.add_argument("--gold-patches", type=Path, help="SWE-bench reference fixes: JSON {instance_id: patch} or JSONL")
    parser.set_defaults(run=run)


def load(paths: list[Path], keep_going: bool) -> list[Trajectory]:
    """Trajectories from raw runs and ingested trajectories.jsonl files alike (through `ingest_paths`);
    with `keep_going` the skipped records are printed, one line each."""
    try:
        result = ingest_paths(paths, keep_going=keep_going)
    except IngestError as error:
        raise UserError(f"{error} (use --keep-going to skip it and diagnose the rest)") from None
    for line in format_skipped(result):
        print(line)
    return result.trajectories


def run(args: argparse.Namespace) -> int:
    trajectories = load(args.paths, args.keep_going)
    if not trajectories and not args.allow_empty:
        raise empty_input(args.paths, args.out)
    if args.gold_patches:
        try:
            attach_gold_patches(trajectories, args.gold_patches)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UserError(f"{args.gold_patches}: not a gold-patch file ({error})") from None
    judge = None
    n, k = args.n or 1, args.k or 1
    if args.judge_url:
        client = OpenAIChatClient(args.judge_url, args.judge_model)
        judge = LLMJudge(client, runs=args.judge_runs, retries=args.judge_retries, workers=args.judge_workers)
        n = args.n or args.judge_runs
        k = args.k or max(1, math.ceil(0.8 * n))
    elif args.propose:
        raise UserError("--propose needs --judge-url (the proposer is an LLM)")
    if k > n:
        raise UserError(f"--k {k} is more than the {n} labelling runs")
    params = SelectionConfig(rho=args.rho, delta=args.delta, k=k, n=n, bootstrap=args.bootstrap, seed=args.seed)
    diagnosis = diagnose(trajectories, args.paths, params, judge=judge, proposer=judge.client if args.propose else None,
                         count_all_failures=args.count_all_failures, progress=True)
    with writing_into(args.out):
        path = write_outputs(diagnosis, args.out)
    print(summary(diagnosis))
    print(f"wrote {args.out / 'capabilities.json'} and {path}")
    return 0


def summary(diagnosis: Diagnosis) -> str:
    """The selection table printed to the terminal."""
    report = diagnosis.report
    lines = [f"{'capability':<30} {'Cov':>5} {'Δ':>6} {'Δ 95% CI':>15} {'paired':>7} {'pass':>5}  selected",
             "-" * 82]
    for s in report.capabilities:
        covs = [c for c in s.cov if c is not None]
        cov = f"{sum(covs) / len(covs):.2f}" if covs else "–"
        delta = f"{s.delta_mean:+.2f}" if s.delta_mean is not None else "–"
        ci = f"[{s.delta_ci[0]:+.2f},{s.delta_ci[1]:+.2f}]" if s.delta_ci else "–"
        paired = f"{s.paired_delta:+.2f}" if s.paired_delta is not None else "–"
        lines.append(f"{s.capability.name:<30} {cov:>5} {delta:>6} {ci:>15} {paired:>7} {s.runs_passed:>2}/{report.params['n']:<2}  "
                     f"{'yes' if s.selected else 'no'}")
    sources = ", ".join(f"{k} {v}" for k, v in report.failure_sources.items())
    lines.append(f"failure sources: {sources}; union coverage of selected: "
                 f"{report.union_coverage:.2f}" if report.union_coverage is not None else f"failure sources: {sources}")
    return "\n".join(lines)
