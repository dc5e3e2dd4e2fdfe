"""The pipeline runner (`tracegym run`: `pipeline`, `cli`) and its resumable run directory
(`rundir`); the target environment (`target`: a τ²-style hotel desk with train and held-out
splits). Held-out evaluation (DESIGN.md, eval) comes later."""
