"""The pipeline runner (`tracegym run`: `pipeline`, `cli`) and its resumable run directory
(`rundir`). Target environments and held-out evaluation (DESIGN.md, eval) come later."""
