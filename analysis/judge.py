"""LLM judge: labels (trajectory, capability) pairs and attributes failures, N independent runs.

Each run asks the judge once per trajectory for a verdict on every capability, with the answer
constrained to a JSON schema and validated with pydantic. A malformed answer (bad JSON, wrong
shape, a capability missing or unknown, a message index out of range, a quote that does not occur
verbatim in the message it cites, a LACKING verdict without one) or a transport error is
retried up to `retries` times with a new seed, then counted in `JudgeResult.malformed` and left
unlabelled for that run; nothing raises. Run r uses seeds 1000·r + attempt. Votes across runs
are taken by `selection.majority` (ties lean to PRESENT).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ClassVar, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from tqdm import tqdm

from tracegym.analysis.attribution import FailureSource
from tracegym.analysis.catalogue import benchmark_family
from tracegym.analysis.judge_case import case_file, conventions, message_text, render_transcript
from tracegym.analysis.llm_client import ChatClient, ClientError
from tracegym.config import option
from tracegym.schema import Capability, Evidence, Label, LabelValue, Trajectory

LABEL_PROMPT = """You are auditing one run of an AI agent, as a careful reader would: read the case file (what the \
run recorded
of the policy the agent was given, the user's hidden instructions, the benchmark's gold actions and outcome) and the
whole transcript.
For EVERY capability listed, decide:
- NA: the task did not need this capability;
- PRESENT: the task needed it and the agent showed it;
- LACKING: the task needed it and the agent clearly failed to show it.
Be conservative: when you are unsure, answer PRESENT. False LACKING labels are costly.
For each capability give the index of the message that decides it (or null) and a short verbatim quote from it.
{conventions}
Capabilities:
{capabilities}"""

SOURCE_PROMPT = """You are auditing a FAILED run of an AI agent on a benchmark with a simulated user. Read the case file
(what the run recorded of the policy the agent was given, the user's hidden instructions, the gold actions and
outcome) and the transcript.
Decide what caused the failure:
- agent: the agent made the mistake;
- user_simulator: the simulated user left its instructions (stopped early, invented details, accepted what it was \
told to decline, contradicted itself);
- benchmark: the expected (gold) outcome is wrong, e.g. it contradicts the policy given what the agent saw.
Answer "agent" unless the transcript shows otherwise. Quote the decisive message."""


def judged_text(trajectory: Trajectory) -> str:
    """What the judge is sent about one run: its case file, then its transcript (`judge_case`)."""
    return f"{case_file(trajectory)}\n\n## Transcript\n{render_transcript(trajectory)}"


class CapabilityVerdict(BaseModel):
    capability: str
    value: Literal["PRESENT", "LACKING", "NA"]
    message_index: int | None
    quote: str


class LabelAnswer(BaseModel):
    verdicts: list[CapabilityVerdict]


class SourceAnswer(BaseModel):
    source: Literal["agent", "user_simulator", "benchmark"]
    reason: str
    message_index: int | None
    quote: str


def _strict_schema(model: type[BaseModel]) -> dict:
    """The model's JSON schema with every object closed and every property required (strict mode)."""
    schema = model.model_json_schema()

    def close(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return schema


def check_quote(trajectory: Trajectory, index: int | None, quote: str, required: bool = False) -> None:
    """Raise ValueError unless the quote occurs verbatim (up to spacing) in message `index`; a
    non-empty quote needs an index, and with `required` both are needed."""
    if index is None:
        if quote.strip() or required:
            raise ValueError("a quote without the index of the message it comes from")
        return
    if not 0 <= index < len(trajectory.messages):
        raise ValueError(f"message_index {index} out of range")
    said = " ".join(quote.split())
    if (said or required) and (not said or said not in message_text(trajectory.messages[index])):
        raise ValueError(f"quote {said[:80]!r} does not occur in message {index}")


@dataclass
class Attempts:
    """Bookkeeping of one question: calls made, retries, whether it ended malformed, errors seen."""

    calls: int = 0
    retried: int = 0
    malformed: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class JudgeResult:
    """Labels over all runs, plus what it took: calls made, retried and malformed answers, and the
    prompt template and model recorded for the report."""

    labels: list[Label] = field(default_factory=list)
    calls: int = 0
    retried: int = 0
    malformed: int = 0
    errors: list[str] = field(default_factory=list)
    model: str = ""
    prompt: str = ""

    def add(self, attempts: Attempts) -> None:
        self.calls += attempts.calls
        self.retried += attempts.retried
        self.malformed += attempts.malformed
        self.errors.extend(attempts.errors)


Answer = TypeVar("Answer", bound=BaseModel)


@dataclass(frozen=True)
class JudgeConfig:
    """The LLM judge: where it is, and how many runs of it label."""

    flag_prefix: ClassVar[str] = "judge"
    url: str | None = option(
        None,
        "OpenAI-compatible API base, e.g. http://127.0.0.1:8000/v1 (key: OPENAI_API_KEY); "
        "none: the deterministic detectors label",
    )
    model: str = option("judge", "model name sent to the judge endpoint")
    runs: int = option(10, "independent labelling runs N")
    retries: int = option(2, "retries of a malformed answer, each with a new seed")
    temperature: float = option(0.7, "sampling temperature of the judge")
    workers: int = option(4, "concurrent judge requests")


class LLMJudge:
    """Labels and attributions from `client` under `config` (runs, retries, temperature, workers)."""

    def __init__(self, client: ChatClient, config: JudgeConfig = JudgeConfig()) -> None:
        self.client = client
        self.config = config

    def _ask(
        self, system: str, user: str, model: type[Answer], check: Callable[[Answer], None], run: int, result: Attempts
    ) -> Answer | None:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        schema = _strict_schema(model)
        for attempt in range(self.config.retries + 1):
            result.calls += 1
            try:
                answer = model.model_validate_json(
                    self.client.complete(
                        messages, schema, model.__name__, self.config.temperature, 1000 * run + attempt
                    )
                )
                check(answer)
                return answer
            except (ClientError, ValidationError, ValueError) as error:
                result.errors.append(f"run {run} attempt {attempt}: {str(error).splitlines()[0]}")
                if attempt < self.config.retries:
                    result.retried += 1
        result.malformed += 1
        return None

    def label(
        self, trajectories: list[Trajectory], capabilities: list[Capability], progress: bool = False
    ) -> JudgeResult:
        """Labels for every (trajectory, capability) pair in each of `runs` runs."""
        listing = "\n".join(f"- {c.name}: {c.description}" for c in capabilities)
        written = conventions({benchmark_family(t.source.benchmark) for t in trajectories})
        system = LABEL_PROMPT.format(capabilities=listing, conventions=f"\n{written}\n" if written else "")
        names = {c.name for c in capabilities}
        result = JudgeResult(model=self.client.model, prompt=system)

        def one(job: tuple[int, Trajectory]) -> tuple[list[Label], Attempts]:
            run, trajectory = job
            attempts = Attempts()

            def check(answer: LabelAnswer) -> None:
                given = [v.capability for v in answer.verdicts]
                if sorted(given) != sorted(names):
                    raise ValueError(f"verdicts name {sorted(given)}, expected each of {sorted(names)} once")
                for verdict in answer.verdicts:
                    check_quote(trajectory, verdict.message_index, verdict.quote, required=verdict.value == "LACKING")

            answer = self._ask(system, judged_text(trajectory), LabelAnswer, check, run, attempts)
            if answer is None:
                return [], attempts
            return [
                Label(
                    trajectory_id=trajectory.id,
                    capability=v.capability,
                    value=LabelValue(v.value),
                    evidence=[Evidence(message_index=v.message_index, quote=v.quote)],
                    labeller=f"judge:{self.client.model}",
                    run=run,
                )
                for v in answer.verdicts
            ], attempts

        jobs = [(run, t) for run in range(self.config.runs) for t in trajectories]
        with ThreadPoolExecutor(self.config.workers) as pool:
            for labels, attempts in tqdm(
                pool.map(one, jobs), total=len(jobs), desc="judging", unit="call", disable=not progress
            ):
                result.labels.extend(labels)
                result.add(attempts)
        return result

    def attribute_failures(
        self, trajectories: list[Trajectory], progress: bool = False
    ) -> tuple[dict[str, FailureSource], JudgeResult]:
        """A judged FailureSource per failed trajectory (one run; unanswered ones are left out)."""
        failed = [t for t in trajectories if not t.success]
        result = JudgeResult(model=self.client.model, prompt=SOURCE_PROMPT)

        def one(trajectory: Trajectory) -> tuple[FailureSource | None, Attempts]:
            attempts = Attempts()

            def check(answer: SourceAnswer) -> None:
                check_quote(trajectory, answer.message_index, answer.quote)

            answer = self._ask(SOURCE_PROMPT, judged_text(trajectory), SourceAnswer, check, 0, attempts)
            if answer is None:
                return None, attempts
            return FailureSource(
                trajectory_id=trajectory.id,
                source=answer.source,
                reason=answer.reason,
                method="judge",
                evidence=Evidence(message_index=answer.message_index, quote=answer.quote),
            ), attempts

        with ThreadPoolExecutor(self.config.workers) as pool:
            answered = list(
                tqdm(pool.map(one, failed), total=len(failed), desc="attributing", unit="call", disable=not progress)
            )
        for _, attempts in answered:
            result.add(attempts)
        return {f.trajectory_id: f for f, _ in answered if f is not None}, result
