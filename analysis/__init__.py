"""Ingestion of real agent runs and contrastive capability diagnosis.

- ingestion: `ingest` (entry point, format sniffing, keep-going) and one `ingest_<format>` module
  per format; `examples` writes a small τ²-style run for the demo; `cli`: `tracegym ingest`;
- diagnosis: `contrast` (pairs per task, gold-change flags), `catalogue`, `detectors` with
  `detect_tau` / `detect_swe`, `attribution` (failure source), `judge` / `proposer` over
  `llm_client`, `selection` (Cov, ER±, Δ, K of N, bootstrap), `diagnose`, `report`,
  `diagnose_cli`: `tracegym diagnose`.
"""
