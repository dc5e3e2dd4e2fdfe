"""LLM judge: labels (trajectory, capability) pairs and attributes failures, N independent runs.

Each run asks the judge once per trajectory for a verdict on every capability, with the answer
constrained to a JSON schema and validated with pydantic. A malformed answer (bad JSON, wrong
shape, a capability missing or unknown, a message index out of range, a quote that does not occur
verbatim in the message it cites, a LACKING verdict without one) or a request refused for its body
is retried up to `retries` times with a new seed, then counted in `JudgeResult.malformed` and left
unlabelled for that run. Run r uses seeds 1000·r + attempt. Votes across runs are taken by
`selection.majority` (ties lean to PRESENT).

The judge stops with a `JudgeError` (a UserError naming the endpoint and the cause) when its
endpoint fails (`llm_client.EndpointError`: unreachable, timing out, the key refused, the model
unknown, after the openai client's own retries) or when none of the first FIRST_QUESTIONS
questions gets a usable answer (with fewer questions, malformed answers are only counted); the
error holds what was judged before it. Usable answers are kept by question in a `Journal`, on disk
with `JudgeConfig.journal`: a rerun with the same journal reuses them (checked again) and asks
only the rest.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from tqdm import tqdm

from tracegym.analysis.attribution import FailureSource
from tracegym.analysis.catalogue import benchmark_family
from tracegym.analysis.judge_case import case_file, conventions, message_text, render_transcript
from tracegym.analysis.llm_client import ChatClient, ClientError, EndpointError, OpenAIChatClient
from tracegym.config import option
from tracegym.errors import UserError
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


# The judge stops when none of its first this many questions gets a usable answer (never with fewer questions).
FIRST_QUESTIONS = 8


@dataclass
class Attempts:
    """Bookkeeping of one question: calls made, retries, whether it ended malformed, whether a
    journalled answer was reused, errors seen."""

    calls: int = 0
    retried: int = 0
    malformed: int = 0
    reused: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class JudgeResult:
    """Labels over all runs, plus what it took: calls made, retried and malformed answers, answers
    reused from the journal, and the prompt template and model recorded for the report."""

    labels: list[Label] = field(default_factory=list)
    calls: int = 0
    retried: int = 0
    malformed: int = 0
    reused: int = 0
    errors: list[str] = field(default_factory=list)
    model: str = ""
    prompt: str = ""

    def add(self, attempts: Attempts) -> None:
        self.calls += attempts.calls
        self.retried += attempts.retried
        self.malformed += attempts.malformed
        self.reused += attempts.reused
        self.errors.extend(attempts.errors)


class JudgeError(UserError):
    """The judge stopped before answering every question; `result` holds what it judged before."""

    def __init__(self, message: str, result: JudgeResult) -> None:
        super().__init__(message)
        self.result = result


Answer = TypeVar("Answer", bound=BaseModel)
Job = TypeVar("Job")
Output = TypeVar("Output")


def _reason(error: Exception) -> str:
    """One line saying why an answer was refused (for a pydantic error: its first problem)."""
    if isinstance(error, ValidationError) and error.errors():
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
        return f"{error.title}: {where + ': ' if where else ''}{first['msg']}{more}"
    return str(error).splitlines()[0]


def _unshown(field_: Any) -> Any:
    """A config field left out of the config's repr (a secret)."""
    field_.repr = False
    return field_


@dataclass(frozen=True)
class JudgeConfig:
    """The LLM judge: where it is, how it is reached, and how many runs of it label."""

    flag_prefix: ClassVar[str] = "judge"
    url: str | None = option(
        None,
        "OpenAI-compatible API base (vLLM, tracegym serve, https://api.openai.com/v1), e.g. "
        "http://127.0.0.1:8000/v1; none: the deterministic detectors label",
    )
    model: str = option("judge", "model name sent to the judge endpoint")
    api_key: str | None = _unshown(
        option(None, "API key of the judge endpoint; none: the OPENAI_API_KEY environment variable, else no key")
    )
    timeout: float = option(120.0, "seconds one judge request may take before it is retried")
    request_retries: int = option(
        2, "retries of a failed judge request (connection, timeout, 408/409/429/5xx), with backoff"
    )
    runs: int = option(10, "independent labelling runs N")
    retries: int = option(2, "retries of a malformed answer, each with a new seed")
    temperature: float = option(0.7, "sampling temperature of the judge")
    workers: int = option(4, "concurrent judge requests")
    journal: str | None = option(
        None,
        "JSONL file the judge's usable answers are appended to as they arrive; answers already in it "
        "(same model, question, run and temperature) are reused, so a stopped run resumes",
    )


class Journal:
    """Usable answers by question key, in memory and, with `path`, appended to a JSONL file as they
    arrive (one object a line: key, kind, trajectory, run, answer). Lines that do not parse (one
    cut short by a kill) are ignored. Safe to share between threads. Errors reading or writing the
    file are UserErrors naming it."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._answers: dict[str, str] = {}
        self._lock = threading.Lock()
        self._ends_cleanly = True
        if path is None or not path.exists():
            return
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"{path}: cannot read the judge's journal: {error}") from None
        self._ends_cleanly = not text or text.endswith("\n")
        for line in text.splitlines():
            try:
                record = json.loads(line)
                self._answers[record["key"]] = str(record["answer"])
            except (ValueError, KeyError, TypeError):
                continue

    @staticmethod
    def key(*parts: object) -> str:
        """The sha256 of the parts that define a question (JSON-encoded)."""
        return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._answers.get(key)

    def put(self, key: str, answer: str, **about: object) -> None:
        """Keep `answer` under `key`; with a path, append it (and `about`) to the file at once."""
        with self._lock:
            self._answers[key] = answer
            if self.path is None:
                return
            line = json.dumps({"key": key, **about, "answer": answer}, ensure_ascii=False) + "\n"
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as handle:
                    handle.write(line if self._ends_cleanly else "\n" + line)
            except OSError as error:
                raise UserError(f"{self.path}: cannot write the judge's journal: {error.strerror or error}") from None
            self._ends_cleanly = True


class LLMJudge:
    """Labels and attributions from `client` under `config` (runs, retries, temperature, workers,
    journal)."""

    def __init__(self, client: ChatClient, config: JudgeConfig = JudgeConfig()) -> None:
        self.client = client
        self.config = config
        self.journal = Journal(Path(config.journal) if config.journal else None)

    def _ask(
        self,
        system: str,
        user: str,
        model: type[Answer],
        check: Callable[[Answer], None],
        run: int,
        result: Attempts,
        about: str,
    ) -> Answer | None:
        """The checked answer to one question (a journalled one if it still passes the checks), or
        None once `retries` retries failed. An EndpointError propagates."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        key = Journal.key(self.client.model, model.__name__, system, user, run, self.config.temperature)
        if (kept := self.journal.get(key)) is not None:
            try:
                answer = model.model_validate_json(kept)
                check(answer)
                result.reused += 1
                return answer
            except ValueError:  # pydantic's ValidationError included: asked again below
                pass
        schema = _strict_schema(model)
        for attempt in range(self.config.retries + 1):
            result.calls += 1
            try:
                raw = self.client.complete(
                    messages, schema, model.__name__, self.config.temperature, 1000 * run + attempt
                )
                answer = model.model_validate_json(raw)
                check(answer)
            except EndpointError:
                raise
            except (ClientError, ValidationError, ValueError) as error:
                result.errors.append(f"run {run} attempt {attempt}: {_reason(error)}")
                if attempt < self.config.retries:
                    result.retried += 1
                continue
            self.journal.put(key, raw, kind=model.__name__, trajectory=about, run=run)
            return answer
        result.malformed += 1
        return None

    def _settle(
        self,
        jobs: list[Job],
        one: Callable[[Job], tuple[Output, Attempts]],
        keep: Callable[[Output], None],
        result: JudgeResult,
        what: str,
        progress: bool,
    ) -> None:
        """Run `one` over `jobs` on `workers` threads and hand each output, in order, to `keep`,
        adding its attempts to `result`. On an EndpointError, or when none of the first
        FIRST_QUESTIONS questions got a usable answer (there being that many), the questions not
        started are skipped, those finished are kept, and a JudgeError is raised."""
        failure = ""
        kept: set[int] = set()
        endpoint_failed: list[EndpointError] = []  # the first, set by the worker that met it

        def guarded(job: Job) -> tuple[Output, Attempts]:
            if endpoint_failed:
                raise endpoint_failed[0]
            try:
                return one(job)
            except EndpointError as error:
                endpoint_failed.append(error)
                raise

        with ThreadPoolExecutor(self.config.workers) as pool:
            futures = [pool.submit(guarded, job) for job in jobs]
            try:
                for number, future in enumerate(
                    tqdm(futures, total=len(jobs), desc=what, unit="call", disable=not progress)
                ):
                    try:
                        output, attempts = future.result()
                    except EndpointError:
                        failure = str(endpoint_failed[0])
                        break
                    keep(output)
                    result.add(attempts)
                    kept.add(number)
                    if number + 1 == FIRST_QUESTIONS and result.malformed == FIRST_QUESTIONS:
                        last = result.errors[-1] if result.errors else "no answer"
                        failure = (
                            f"{self.client.endpoint}: none of the first {number + 1} questions got a usable answer "
                            f"from model {self.client.model!r} in {self.config.retries + 1} tries each; last: {last}"
                        )
                        break
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
        if not failure:
            return
        for number, future in enumerate(futures):
            if number not in kept and not future.cancelled() and future.exception() is None:
                output, attempts = future.result()
                keep(output)
                result.add(attempts)
                kept.add(number)
        answered = len(kept) - result.malformed
        kept_where = (
            f"their answers are kept in {self.journal.path}: a rerun with that journal asks only the rest"
            if self.journal.path
            else "set a journal (--judge-journal FILE) to keep answers across runs"
        )
        raise JudgeError(
            f"LLM judge stopped {what}: {failure}; {answered} of {len(jobs)} questions answered, {kept_where}", result
        )

    def label(
        self, trajectories: list[Trajectory], capabilities: list[Capability], progress: bool = False
    ) -> JudgeResult:
        """Labels for every (trajectory, capability) pair in each of `runs` runs (JudgeError: see
        the module docstring)."""
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

            answer = self._ask(system, judged_text(trajectory), LabelAnswer, check, run, attempts, trajectory.id)
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
        self._settle(jobs, one, result.labels.extend, result, "labelling", progress)
        return result

    def attribute_failures(
        self, trajectories: list[Trajectory], progress: bool = False
    ) -> tuple[dict[str, FailureSource], JudgeResult]:
        """A judged FailureSource per failed trajectory (one run; unanswered ones are left out;
        JudgeError: see the module docstring)."""
        failed = [t for t in trajectories if not t.success]
        result = JudgeResult(model=self.client.model, prompt=SOURCE_PROMPT)
        found: dict[str, FailureSource] = {}

        def one(trajectory: Trajectory) -> tuple[FailureSource | None, Attempts]:
            attempts = Attempts()

            def check(answer: SourceAnswer) -> None:
                check_quote(trajectory, answer.message_index, answer.quote)

            answer = self._ask(SOURCE_PROMPT, judged_text(trajectory), SourceAnswer, check, 0, attempts, trajectory.id)
            if answer is None:
                return None, attempts
            return FailureSource(
                trajectory_id=trajectory.id,
                source=answer.source,
                reason=answer.reason,
                method="judge",
                evidence=Evidence(message_index=answer.message_index, quote=answer.quote),
            ), attempts

        def keep(source: FailureSource | None) -> None:
            if source is not None:
                found[source.trajectory_id] = source

        self._settle(failed, one, keep, result, "attributing", progress)
        return found, result


def connect(config: JudgeConfig) -> LLMJudge:
    """The judge behind `config.url` through the openai client: key `config.api_key` (else
    OPENAI_API_KEY), `timeout` and `request_retries` per request. ValueError without a URL."""
    if not config.url:
        raise ValueError("the judge needs a URL")
    client = OpenAIChatClient(
        config.url, config.model, api_key=config.api_key, timeout=config.timeout, max_retries=config.request_retries
    )
    return LLMJudge(client, config)
