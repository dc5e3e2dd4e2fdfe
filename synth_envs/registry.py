"""Environment families, and the one table of which family trains which capability.

A family registers itself once, reasoning-gym style:

    @register
    class StructuredDataReasoning(Environment): ...

`make_env("structured_data_reasoning", n_customers=40)` builds one with those knobs.

`CAPABILITY_TABLE` maps every capability of `tracegym.analysis.catalogue` to the family that
trains it, or to no family with the reason; each family's own `capability` is a row pointing back
at it. `match_capabilities` reads the table for every capability it knows; only capabilities an
LLM proposer invented (origin "proposed") fall back to TF-IDF cosine between their description
and the families' descriptions (threshold 0.12 by default). A capability that matches nothing is
returned as unmatched with its reason, never dropped silently.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from tracegym.schema import Capability
from tracegym.synth_envs.base import Environment


@dataclass(frozen=True)
class Row:
    """The family that trains a capability (None: no family does) and why."""

    family: str | None
    reason: str


CAPABILITY_TABLE: dict[str, Row] = {
    "structured_data_reasoning": Row("structured_data_reasoning", "filters, a join and an aggregate over tool results"),
    "multi_step_task_completion": Row(
        "multi_step_task_completion", "2-6 dependent operations, some of them bulk updates"
    ),
    "precondition_verification": Row("precondition_verification", "records must be read before any write"),
    "tool_calling_precision": Row("tool_calling_precision", "exact types, formats, enums and looked-up ids"),
    "error_recovery": Row("error_recovery", "transient, rate-limit, session and moved-id errors to act on"),
    "causal_diagnosis": Row("causal_diagnosis", "injected cause and slice to find with SQL"),
    "policy_compliance": Row(
        "precondition_verification",
        "about half its requests break a policy rule and must be refused "
        "naming it; it has no user pressure and no transfer to a human",
    ),
    "fault_localisation": Row(
        "code_repair", "the bug hides in one of the module's functions; an edit elsewhere is a checked wrong trajectory"
    ),
    "patch_production": Row(
        "code_repair",
        "0.4 of the reward for the failing target test and hidden inputs of the buggy "
        "function passing after the edit, then 0.4 for every test and hidden input "
        "that passed before still passing; no edit earns at most 0.1",
    ),
    "test_verification": Row(
        None,
        "code_repair offers run_tests, but no family's reward depends on running the tests "
        "after the last edit, so none would train it",
    ),
    "issue_reproduction": Row(
        None,
        "no family's reward depends on showing the failure before the first edit: "
        "code_repair grades only the final module",
    ),
    "edit_scope": Row(
        "code_repair", "0.1 of the reward for a minimal edit (at most 2 changed lines beyond the reference fix)"
    ),
}

_FAMILIES: dict[str, type[Environment]] = {}
_LOADED = False


def register(cls: type[Environment]) -> type[Environment]:
    """Class decorator: register a family under its `name`."""
    if cls.name in _FAMILIES and _FAMILIES[cls.name] is not cls:
        raise ValueError(f"family '{cls.name}' is registered twice")
    _FAMILIES[cls.name] = cls
    return cls


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
    """The family named `name`, or the family the table gives the capability `name`; KeyError
    naming the choices (and the table's reason when the capability has no family)."""
    _load_families()
    key = _normalise(name)
    row = CAPABILITY_TABLE.get(key)
    family = key if key in _FAMILIES else row.family if row else None
    if family is None:
        why = f" (capability without a family: {row.reason})" if row else ""
        raise KeyError(f"unknown environment family '{name}'{why}; known: {', '.join(sorted(_FAMILIES))}")
    return _FAMILIES[family]


def make_env(family: str, **knobs: Any) -> Environment:
    """A fresh environment of `family` with difficulty `knobs` (others at their defaults)."""
    cls = get_family(family)
    return cls(cls.Config(**knobs))


def knob_settings(family: str) -> list[dict[str, Any]]:
    """A family's default knobs, then every rung of its ladder that differs from them (full knob dicts)."""
    cls = get_family(family)
    default = asdict(cls.Config())
    settings = [default]
    for rung in cls.ladder:
        knobs = {**default, **rung}
        if knobs not in settings:
            settings.append(knobs)
    return settings


@dataclass(frozen=True)
class Match:
    """How one capability was matched: the family (None when unmatched), the method, score and reason."""

    capability: str
    family: str | None
    method: str  # "table", "no family", "description" or "unmatched"
    score: float
    reason: str = ""


def match_capabilities(capabilities: Iterable[Capability], threshold: float = 0.12) -> list[Match]:
    """Pick a family per capability: the table's row, else (proposed capabilities only) TF-IDF."""
    capabilities = list(capabilities)
    proposed = [c for c in capabilities if c.origin == "proposed" and _normalise(c.name) not in CAPABILITY_TABLE]
    by_description = _match_descriptions(proposed, threshold)
    matches = []
    for capability in capabilities:
        row = CAPABILITY_TABLE.get(_normalise(capability.name))
        if row is not None:
            method = "table" if row.family else "no family"
            matches.append(Match(capability.name, row.family, method, float(bool(row.family)), row.reason))
        elif capability.name in by_description:
            matches.append(by_description[capability.name])
        else:
            matches.append(
                Match(
                    capability.name,
                    None,
                    "unmatched",
                    0.0,
                    "not in the capability table, and only proposed capabilities are matched by description",
                )
            )
    return matches


def _match_descriptions(capabilities: list[Capability], threshold: float) -> dict[str, Match]:
    """TF-IDF cosine between each capability's name and description and each family's."""
    if not capabilities:
        return {}
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    known = families()
    names = list(known)
    corpus = [f"{known[n].capability.replace('_', ' ')} {known[n].description}" for n in names]
    queries = [f"{c.name.replace('_', ' ')} {c.description}" for c in capabilities]
    vectoriser = TfidfVectorizer(stop_words="english", sublinear_tf=True).fit(corpus + queries)
    similarity = cosine_similarity(vectoriser.transform(queries), vectoriser.transform(corpus))
    matches = {}
    for row, capability in enumerate(capabilities):
        best = int(similarity[row].argmax())
        score = round(float(similarity[row, best]), 4)
        if score >= threshold:
            matches[capability.name] = Match(
                capability.name, names[best], "description", score, f"TF-IDF cosine {score}"
            )
        else:
            matches[capability.name] = Match(
                capability.name, None, "unmatched", score, f"TF-IDF cosine {score} below the threshold {threshold}"
            )
    return matches
