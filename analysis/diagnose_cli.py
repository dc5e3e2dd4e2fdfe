"""`tracegym diagnose PATH... --out DIR`: find the capabilities an agent lacks, with evidence.

PATHs are run files or folders (anything `tracegym ingest` reads, including a trajectories.jsonl
it wrote). Writes capabilities.json, report.md, coverage_delta.png, labels.jsonl and
failure_sources.jsonl into DIR, replaced together (see tracegym.files), and prints the selection
table. Settings come from `DiagnoseConfig` (flags, or `--config FILE`). With --keep-going bad
records are skipped and listed (printed and in report.md); inputs holding no trajectory leave DIR
as it was (exit 1) unless --allow-empty. Without --judge-url the deterministic detectors label
(N = K = 1); with it, the judge labels in --judge-runs runs and K defaults to 80% of them (the
paper's 8 of 10). A run's labels and failure source do not depend on the other PATHs given.
τ-style runs are checked against their domain's rules (`metadata.domain`): built-in (airline,
retail, telecom), installed (entry points `tracegym.domains`), or given with --domain FILE; runs of
any other domain get the generic checks (report.md says which applied).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tracegym.analysis.diagnose import DiagnoseConfig, attach_gold_patches, diagnose
from tracegym.analysis.ingest import IngestError, IngestResult, ingest_paths
from tracegym.analysis.ingest.outputs import empty_input, format_skipped
from tracegym.analysis.judge import connect
from tracegym.analysis.report import selection_table, write_outputs
from tracegym.analysis.rules import load_domain
from tracegym.analysis.rules import register as register_domain
from tracegym.config import add_config_arguments, resolve_config
from tracegym.errors import UserError
from tracegym.files import writing_into


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diagnose", help="contrastive capability diagnosis of agent runs", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="run files/folders or an ingested trajectories.jsonl"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument(
        "--domain",
        action="append",
        default=[],
        metavar="FILE",
        help="a domain's rules for runs of that domain (repeatable): a .toml or .json declaration, a .py file "
        "holding a Domain, or module:attribute; replaces a registered domain of the same name",
    )
    add_config_arguments(parser, DiagnoseConfig)
    parser.set_defaults(run=run)


def load(paths: list[Path], keep_going: bool) -> IngestResult:
    """Trajectories from raw runs and ingested trajectories.jsonl files alike (through `ingest_paths`);
    every skipped record (with `keep_going`) and every walked file that is not a run is printed,
    one line each."""
    try:
        result = ingest_paths(paths, keep_going=keep_going)
    except IngestError as error:
        raise UserError(f"{error} (use --keep-going to skip it and diagnose the rest)") from None
    for line in format_skipped(result):
        print(line)
    if result.ignored:
        print(f"\nignored files, not runs ({len(result.ignored)}):")
        for item in result.ignored:
            print(f"  {item.path}: {item.reason}")
    return result


def register_domains(specs: list[str]) -> None:
    """Load and register each domain `specs` names (see `rules.registry.load_domain`), printing one
    line each; a broken one is a UserError naming it."""
    for spec in specs:
        domain = register_domain(load_domain(spec), replace_registered=True)
        print(f"domain {domain.name}: rules from {spec}")


def check(config: DiagnoseConfig) -> None:
    """The checks that span settings (one-line UserErrors)."""
    selection = config.selection.for_runs(config.judge.runs if config.judge.url else 1)
    if config.propose and not config.judge.url:
        raise UserError("--propose needs --judge-url (the proposer is an LLM)")
    if config.judge.runs < 1:
        raise UserError(f"--judge-runs {config.judge.runs}: at least one labelling run is needed")
    if not 1 <= selection.k <= selection.n:
        raise UserError(f"--k {selection.k} must be between 1 and the {selection.n} labelling runs")


def run(args: argparse.Namespace) -> int:
    config = resolve_config(DiagnoseConfig, args)
    check(config)
    register_domains(args.domain)
    ingested = load(args.paths, config.keep_going)
    trajectories = ingested.trajectories
    if not trajectories and not config.allow_empty:
        raise empty_input(args.paths, args.out)
    if config.gold_patches:
        try:
            attach_gold_patches(trajectories, Path(config.gold_patches))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UserError(f"{config.gold_patches}: not a gold-patch file ({error})") from None
    judge = connect(config.judge) if config.judge.url else None
    diagnosis = diagnose(trajectories, args.paths, config, judge=judge, progress=True)
    diagnosis.ingest = ingested
    with writing_into(args.out):
        path = write_outputs(diagnosis, args.out)
    print(selection_table(diagnosis.report))
    print(f"wrote {args.out / 'capabilities.json'} and {path}")
    return 0
