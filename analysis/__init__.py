"""Ingestion of real agent runs and contrastive capability diagnosis.

- ingestion: the `ingest` package (entry point, format sniffing, keep-going, one module per
  format); `examples` writes a small τ²-style run for the demo; `ingest_cli`: `tracegym ingest`;
- diagnosis: `contrast` (pairs per task, gold-change flags), `catalogue`, `detectors` with
  `detect_tau` / `detect_swe`, `attribution` (failure source), `judge` / `proposer` over
  `llm_client`, `selection` (Cov, ER±, Δ, K of N, bootstrap), `diagnose`, `report`,
  `diagnose_cli`: `tracegym diagnose`.
"""
