"""The pipeline runner (`tracegym run`: `pipeline`, `run_cli`) and its resumable run directory
(`rundir`, `run_log`, `stage_pool`); the target environment (`target`: a τ²-style hotel desk with
train and held-out splits), the base agent and the loop's arms (`base_agent`, `arms`, `play`);
held-out evaluation (`tracegym eval`: `evaluate`, `eval_cli`) and the loop's report
(`loop_report`)."""
