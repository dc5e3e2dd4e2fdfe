"""Ingestion of real agent runs and contrastive capability diagnosis.

- ingestion: the `ingest` package (entry point, format sniffing, keep-going, one module per
  format); `examples` writes a small τ²-style run for the demo; `ingest_cli`: `tracegym ingest`;
- diagnosis: `contrast` (pairs per task, tasks failing for every agent), `catalogue`, `detectors`
  with `detect_tau` (over the `rules` package: one executable rule module per τ² domain; rulings in
  docs/detectors.md) and
  `detect_swe`, `attribution` (failure source, from each run alone), `judge` / `proposer` over
  `llm_client`, `selection` (Cov, ER±, Δ, K of N, bootstrap), `diagnose`, `report`,
  `diagnose_cli`: `tracegym diagnose`.
"""
