"""Rule executors: the executable rules of τ-style customer-service domains.

- `conversation`: what a run established (calls with parsed results, records read, what the user
  said, explicit confirmations);
- `domain`: what a rule module declares (`Domain`, `ActionRule`, `ConversationRule`, `Finding`)
  and `GENERIC`, the stand-in for domains no module knows;
- `checks`: the checks all domains share, including the comparison with gold actions;
- one rule module per τ²-bench domain: `airline`, `retail`, `telecom`.
"""

from __future__ import annotations

from tracegym.analysis.rules import airline, retail, telecom
from tracegym.analysis.rules.domain import GENERIC, Domain
from tracegym.schema import Trajectory

DOMAINS: dict[str, Domain] = {module.DOMAIN.name: module.DOMAIN for module in (airline, retail, telecom)}


def domain_for(trajectory: Trajectory) -> Domain:
    """The rule module of the trajectory's domain (`metadata.domain`), else the generic checks."""
    return DOMAINS.get(str(trajectory.metadata.get("domain") or ""), GENERIC)
