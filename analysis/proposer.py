"""LLM proposer: suggests new general capabilities from same-task success/failure pairs.

The proposer sees up to `max_pairs` contrasted pairs (a failure and a success of the same task)
and answers, under a JSON schema, up to 10 capabilities {name, description, example_tasks}.
Suggestions are deduplicated against the catalogue and each other: a suggestion is dropped when
its normalised name equals a known one or the TF-IDF cosine similarity of its name+description to
a known one is at least `similarity` (default 0.5).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, ValidationError

from tracegym.analysis.contrast import TaskContrast
from tracegym.analysis.judge import _strict_schema
from tracegym.analysis.judge_case import render_transcript
from tracegym.analysis.llm_client import ChatClient, ClientError, EndpointError
from tracegym.schema import Capability, Trajectory

PAIR_CHARS = 6_000  # characters of each transcript shown to the proposer

PROPOSER_PROMPT = """You compare runs of an AI agent on the same tasks: for each task you see a FAILED run and a \
SUCCESSFUL run.
Propose up to 10 GENERAL capabilities whose absence explains the failures (e.g. "precondition_verification").
Domain procedures (e.g. "flight_rebooking_procedure") are NOT capabilities. Names are snake_case;
descriptions are 2-3 sentences; example_tasks lists task ids where the capability was lacking.
Already known (do not repeat): {known}"""


class ProposedCapability(BaseModel):
    name: str
    description: str
    example_tasks: list[str]


class Proposal(BaseModel):
    capabilities: list[ProposedCapability] = Field(max_length=10)


def normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def deduplicate(proposed: list[Capability], known: list[Capability], similarity: float = 0.5) -> list[Capability]:
    """The proposals that are new relative to `known` and to earlier proposals, in order."""
    # imported here: slow to import, needed only when proposing
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    kept: list[Capability] = []
    for candidate in proposed:
        reference = known + kept
        if normalise(candidate.name) in {normalise(c.name) for c in reference}:
            continue
        if reference:
            texts = [f"{c.name.replace('_', ' ')} {c.description}" for c in reference + [candidate]]
            matrix = TfidfVectorizer(stop_words="english").fit_transform(texts)
            if cosine_similarity(matrix[-1], matrix[:-1]).max() >= similarity:
                continue
        kept.append(candidate)
    return kept


def propose(
    client: ChatClient,
    contrasts: list[TaskContrast],
    trajectories: dict[str, Trajectory],
    known: list[Capability],
    max_pairs: int = 8,
    retries: int = 2,
    similarity: float = 0.5,
) -> list[Capability]:
    """New capabilities suggested from one pair per task (up to `max_pairs` tasks); [] when the
    proposer never answers in the schema. An EndpointError (a UserError) propagates."""
    sections = []
    for entry in contrasts[:max_pairs]:
        success, failure = entry.pairs[0]
        sections.append(
            f"## Task {entry.task}\n### FAILED run\n{render_transcript(trajectories[failure], PAIR_CHARS)}"
            f"\n### SUCCESSFUL run\n{render_transcript(trajectories[success], PAIR_CHARS)}"
        )
    if not sections:
        return []
    messages = [
        {"role": "system", "content": PROPOSER_PROMPT.format(known=", ".join(c.name for c in known))},
        {"role": "user", "content": "\n\n".join(sections)},
    ]
    for attempt in range(retries + 1):
        try:
            answer = Proposal.model_validate_json(
                client.complete(messages, _strict_schema(Proposal), "Proposal", 0.7, attempt)
            )
        except EndpointError:
            raise
        except (ClientError, ValidationError, ValueError):
            continue
        proposed = [
            Capability(name=normalise(p.name), description=p.description, examples=p.example_tasks, origin="proposed")
            for p in answer.capabilities
            if normalise(p.name)
        ]
        return deduplicate(proposed, known, similarity)
    return []
