"""Capability name -> environment family, and matching a CapabilityReport to families.

A family registers itself once, reasoning-gym style:

    @register(aliases=("data_reasoning",))
    class StructuredDataReasoning(Environment): ...

`make_env("structured_data_reasoning", n_records=40)` builds one with those knobs.
`match_capabilities(capabilities)` maps each capability (name + description, e.g. the selected
ones of a CapabilityReport) to a family: by exact or alias name first, else by TF-IDF cosine
between its description and each family's description (threshold 0.12 by default); a capability
that matches nothing is returned as unmatched, never dropped silently.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from tracegym.schema import Capability
from tracegym.synth_envs.base import Environment

_FAMILIES: dict[str, type[Environment]] = {}
_ALIASES: dict[str, str] = {}
_LOADED = False


def register(aliases: Iterable[str] = ()) -> Callable[[type[Environment]], type[Environment]]:
    """Class decorator: register a family under its `name` (and optional alias names)."""

    def decorate(cls: type[Environment]) -> type[Environment]:
        if cls.name in _FAMILIES and _FAMILIES[cls.name] is not cls:
            raise ValueError(f"family '{cls.name}' is registered twice")
        _FAMILIES[cls.name] = cls
        for alias in (cls.name, cls.capability, *aliases):
            _ALIASES[_normalise(alias)] = cls.name
        return cls

    return decorate


def _normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _load_families() -> None:
    """Import every module of tracegym.synth_envs.families once (each registers itself)."""
    global _LOADED
    if _LOADED:
        return
    from tracegym.synth_envs import families

    for module in pkgutil.iter_modules(families.__path__):
        importlib.import_module(f"{families.__name__}.{module.name}")
    _LOADED = True


def families() -> dict[str, type[Environment]]:
    """All registered families by name, sorted."""
    _load_families()
    return dict(sorted(_FAMILIES.items()))


def get_family(name: str) -> type[Environment]:
    """The family registered under `name` or one of its aliases; KeyError naming the choices."""
    _load_families()
    key = _ALIASES.get(_normalise(name))
    if key is None:
        raise KeyError(f"unknown environment family '{name}'; known: {', '.join(sorted(_FAMILIES))}")
    return _FAMILIES[key]


def make_env(family: str, **knobs: Any) -> Environment:
    """A fresh environment of `family` with difficulty `knobs` (others at their defaults)."""
    cls = get_family(family)
    return cls(cls.Config(**knobs))


@dataclass(frozen=True)
class Match:
    """How one capability was matched: the family (None when unmatched), the method and score."""

    capability: str
    family: str | None
    method: str  # "name", "description" or "unmatched"
    score: float


def match_capabilities(capabilities: Iterable[Capability], threshold: float = 0.12) -> list[Match]:
    """Pick a family per capability: exact/alias name, else TF-IDF cosine over descriptions."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    capabilities = list(capabilities)
    known = families()
    names = list(known)
    corpus = [f"{known[n].capability.replace('_', ' ')} {known[n].description}" for n in names]
    queries = [f"{c.name.replace('_', ' ')} {c.description}" for c in capabilities]
    vectoriser = TfidfVectorizer(stop_words="english", sublinear_tf=True).fit(corpus + queries)
    similarity = cosine_similarity(vectoriser.transform(queries), vectoriser.transform(corpus))
    matches = []
    for row, capability in enumerate(capabilities):
        by_name = _ALIASES.get(_normalise(capability.name))
        if by_name is not None:
            matches.append(Match(capability.name, by_name, "name", 1.0))
            continue
        best = int(similarity[row].argmax())
        score = float(similarity[row, best])
        if score >= threshold:
            matches.append(Match(capability.name, names[best], "description", round(score, 4)))
        else:
            matches.append(Match(capability.name, None, "unmatched", round(score, 4)))
    return matches
