"""Which domain's rules diagnose a run, and how a domain is registered.

`DOMAINS` maps a domain's name (a τ² run's `info.environment_info.domain_name`, ingested as the
trajectory's `metadata.domain`) to its `Domain`: airline, retail and telecom are built in. A user's
domain is registered without editing the package, from
- a declaration file, TOML or JSON (`load_domain("hotel.toml")`; the format is in `rules.declared`),
- a Python file or module holding a `Domain` (`load_domain("rules.py")` takes its `DOMAIN`, or its
  only `Domain`; `load_domain("package.module:ATTRIBUTE")`),
- an installed package's entry point in the group `tracegym.domains` (ENTRY_POINTS) named after the
  domain, whose object is its `Domain`: looked up the first time a run of an unregistered domain is
  diagnosed (`pyproject.toml`: `[project.entry-points."tracegym.domains"] hotel = "pkg.rules:DOMAIN"`).
`register` adds a domain; `domain_for(trajectory)` gives the trajectory's, else `GENERIC` (writes
guessed from tool-name verbs, no confirmation rule, no record reads checked). Every problem with a
file, module or entry point is a `DomainError` naming it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from dataclasses import dataclass, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from tracegym.analysis.catalogue import benchmark_family
from tracegym.analysis.rules import airline, retail, telecom
from tracegym.analysis.rules.conversation import Conversation, normal
from tracegym.analysis.rules.declared import DeclarationError, load_declaration
from tracegym.analysis.rules.domain import GENERIC, Domain
from tracegym.errors import UserError
from tracegym.schema import Trajectory

ENTRY_POINTS = "tracegym.domains"
DOMAINS: dict[str, Domain] = {}  # the registered domains by name; change it through `register`
_ENTRY_POINT_DOMAINS: dict[str, Domain | None] = {}  # names looked up among the entry points (None: none there)


class DomainError(UserError):
    """A domain that cannot be registered or loaded: the message names its file, module or entry point."""


def register(domain: Domain, replace_registered: bool = False) -> Domain:
    """Add `domain` under its name and return it; DomainError where another domain holds the name,
    unless `replace_registered`."""
    if not isinstance(domain, Domain):
        raise DomainError(f"cannot register {type(domain).__name__} {domain!r}: not a tracegym Domain")
    held = DOMAINS.get(domain.name)
    if held is not None and held is not domain and not replace_registered:
        raise DomainError(f"domain {domain.name!r} is already registered (from {held.origin})")
    DOMAINS[domain.name] = domain
    return domain


def unregister(name: str) -> Domain | None:
    """Remove the domain registered as `name` (returned; None where there was none)."""
    _ENTRY_POINT_DOMAINS.pop(name, None)
    return DOMAINS.pop(name, None)


def lookup(name: str) -> Domain | None:
    """The domain registered as `name`, else the one an entry point of that name provides, else None."""
    if name in DOMAINS:
        return DOMAINS[name]
    if name not in _ENTRY_POINT_DOMAINS:
        _ENTRY_POINT_DOMAINS[name] = _from_entry_point(name) if name else None
    return _ENTRY_POINT_DOMAINS[name]


def domain_for(trajectory: Trajectory) -> Domain:
    """The rules of the trajectory's domain (`metadata.domain`), else the generic checks."""
    return lookup(str(trajectory.metadata.get("domain") or "")) or GENERIC


def _from_entry_point(name: str) -> Domain | None:
    found = [point for point in entry_points(group=ENTRY_POINTS) if point.name == name]
    if not found:
        return None
    values = sorted({point.value for point in found})
    where = f"entry point {name} = {values[0]!r} (group {ENTRY_POINTS})"
    if len(values) > 1:
        raise DomainError(f"domain {name!r}: several entry points in group {ENTRY_POINTS}: {', '.join(values)}")
    try:
        loaded = found[0].load()
    except Exception as error:  # a broken plugin is the user's to fix: say which and why
        raise DomainError(f"{where}: cannot be loaded ({type(error).__name__}: {error})") from None
    domain = _as_domain(loaded, where)
    if domain.name != name:
        raise DomainError(f"{where}: its Domain is named {domain.name!r}, not {name!r}")
    return replace(domain, origin=f"{domain.origin}, {where}" if domain.origin != "built-in" else where)


def _as_domain(value: Any, where: str) -> Domain:
    if not isinstance(value, Domain):
        raise DomainError(f"{where}: is a {type(value).__name__}, not a tracegym Domain")
    return value


def load_domain(spec: str | Path) -> Domain:
    """The domain `spec` names: a .toml or .json declaration, a .py file, or `module:attribute`
    (see the module docstring). It is not registered: pass it to `register`."""
    path = Path(spec)
    if path.suffix in (".toml", ".json"):
        try:
            return load_declaration(path)
        except DeclarationError as error:
            raise DomainError(str(error)) from None
    if path.suffix == ".py":
        return _from_python_file(path)
    module, colon, attribute = str(spec).partition(":")
    if colon and module and attribute:
        return _from_module(module, attribute)
    raise DomainError(f"{spec}: a domain is a .toml, .json or .py file, or module:attribute")


def _from_python_file(path: Path) -> Domain:
    if not path.is_file():
        raise DomainError(f"{path}: no such file")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"tracegym_domain_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DomainError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        sys.modules.pop(name, None)
        raise DomainError(f"{path}: failed to run ({type(error).__name__}: {error})") from None
    if hasattr(module, "DOMAIN"):
        return replace(_as_domain(module.DOMAIN, f"{path}: DOMAIN"), origin=str(path))
    found = [value for value in vars(module).values() if isinstance(value, Domain)]
    if len(found) != 1:
        many = f"defines {len(found)} Domains ({', '.join(d.name for d in found)})" if found else "defines no Domain"
        raise DomainError(f"{path}: {many}; name the one to use DOMAIN")
    return replace(found[0], origin=str(path))


def _from_module(module_name: str, attribute: str) -> Domain:
    where = f"{module_name}:{attribute}"
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise DomainError(f"{where}: cannot import {module_name} ({type(error).__name__}: {error})") from None
    if not hasattr(module, attribute):
        raise DomainError(f"{where}: module {module_name} has no attribute {attribute!r}")
    domain = _as_domain(getattr(module, attribute), where)
    return replace(domain, origin=where) if domain.origin == "built-in" else domain


@dataclass(frozen=True)
class DomainUse:
    """The rules applied to the runs of one domain name: `domain` (GENERIC where none is registered),
    how many `runs`, and the `unapplied` rule sentences that none of their recorded policies holds
    (those rules were skipped)."""

    name: str
    domain: Domain
    runs: int
    unapplied: tuple[str, ...]


def domain_uses(trajectories: list[Trajectory]) -> list[DomainUse]:
    """Per domain name of the τ-family trajectories, in order of first appearance, the rules applied."""
    by_name: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        if benchmark_family(trajectory.source.benchmark) == "tau":
            by_name.setdefault(str(trajectory.metadata.get("domain") or ""), []).append(trajectory)
    uses = []
    for name, runs in by_name.items():
        domain = lookup(name) or GENERIC
        policies = {Conversation(t).policy for t in runs}
        unapplied = tuple(
            sentence
            for sentence in domain.sentences()
            if "" not in policies and not any(normal(sentence) in policy for policy in policies)
        )
        uses.append(DomainUse(name, domain, len(runs), unapplied))
    return uses


for _module in (airline, retail, telecom):
    register(_module.DOMAIN)
