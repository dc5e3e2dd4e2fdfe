"""Rule executors: the executable rules of τ-style customer-service domains.

- `conversation`: what a run established (calls with parsed results, records read, what the user
  said, explicit confirmations);
- `domain`: what a domain declares (`Domain`, `ActionRule`, `ConversationRule`, `Finding`) and
  `GENERIC`, the stand-in for domains no one registered;
- `checks`: the checks all domains share, including the comparison with gold actions;
- one rule module per τ²-bench domain: `airline`, `retail`, `telecom`;
- `declared`, `declared_checks`: domains declared as data (a TOML or JSON file) and their checks;
- `registry`: the registered domains (`DOMAINS`, `register`, `domain_for`), loaded from files,
  modules and the `tracegym.domains` entry points (`load_domain`).
"""

from __future__ import annotations

from tracegym.analysis.rules.registry import DOMAINS, DomainError, domain_for, load_domain, register

__all__ = ["DOMAINS", "DomainError", "domain_for", "load_domain", "register"]
