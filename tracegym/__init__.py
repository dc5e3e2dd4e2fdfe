"""tracegym: capability-targeted training for LLM agents.

Stages (each its own import package): `tracegym.analysis` (diagnose), `tracegym.synth_envs`
(environments), `tracegym.adapters` (LoRA training), `tracegym.moe_router` (routing, serving),
`tracegym.eval` (evaluation). This package holds the core they share.
"""

__version__ = "0.1.0"
