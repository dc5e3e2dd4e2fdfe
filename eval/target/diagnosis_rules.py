"""The hotel desk's diagnosis rules: `domain.toml` beside this module, every rule's sentence checked
against the handbook. `tracegym diagnose` finds `DOMAIN` through the `tracegym.domains` entry point
named "hotel" (pyproject.toml), as it would find a user's installed domain."""

from __future__ import annotations

from pathlib import Path

from tracegym.analysis.rules.declared import load_declaration
from tracegym.eval.target.handbook import HANDBOOK

DECLARATION = Path(__file__).with_name("domain.toml")
DOMAIN = load_declaration(DECLARATION, policy=HANDBOOK)
