"""OpenHands SWE-bench output folders: `llm_completions/<id>/*.json` + `output.swebench_eval.md`.

The last completion file of an instance holds the whole conversation (`messages`) and the final
reply (`response.choices[0].message`). The verdict comes from `output.swebench_eval.md` (resolved /
unresolved / empty-patch lists); test results from the harness `report: {...}` line of
`output.swebench_eval.logs/instance_<id>.log`; the submitted diff from the "Got git diff" block of
`infer_logs/instance_<id>.log`. Cross-reference check: the eval log's `resolved` agrees with the
summary (the summary is kept when they differ: it is what the benchmark reported).

`conversation` reads one completion record (also for the experiments-repository layout): with
native function calling its `messages` hold OpenAI `tool_calls` and `role: tool` results; without,
`messages` hold the calls as text (`<function=NAME>\n<parameter=KEY>VALUE</parameter>\n</function>`)
and the results as user turns ("EXECUTION RESULT of [NAME]:\n..."), and `fncall_messages` /
`fncall_response` the same turns in the structured form, which is preferred when present.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from tracegym.analysis.ingest.common import (
    Batch,
    IngestError,
    InputFile,
    RecordError,
    load_json,
    openai_messages,
    preview,
    read_text,
)
from tracegym.analysis.ingest.swebench import BENCHMARK, HarnessReport, harness_report, swe_trajectory
from tracegym.schema import Message, Source, ToolCall, Trajectory

FORMAT = "openhands"
SUMMARY = "output.swebench_eval.md"
_SECTION = re.compile(r"^## (.+?) Instances\s*$")
_ITEM = re.compile(r"^- \[([^\]]+)\]")
_REPORT_LINE = re.compile(r"report: (\{.*\})\s*$", re.MULTILINE)
_DIFF_BLOCK = re.compile(r"Got git diff for instance [^\n]*:\n-{8}\n(.*?)-{8}\n", re.DOTALL)
# A completion file's name ends in its time: -<unix time>.json or _<ISO date-time>.json.
_TIMESTAMP = re.compile(r"(?:-(\d{9,}(?:\.\d+)?)|_(\d{4}-\d\d-\d\dT[\d:.+-]+Z?))\.json$")
_TEXT_CALL = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)>(.*?)</parameter>", re.DOTALL)
_RESULT = re.compile(r"\A\s*EXECUTION RESULT of \[([^\]]+)\]:\n?")


def sniff(file: InputFile) -> bool:
    """A logged LLM completion: `messages`, `response` and `kwargs`."""
    return _is_completion(file.document())


def _is_completion(document: Any) -> bool:
    return isinstance(document, dict) and {"messages", "response", "kwargs"} <= document.keys()


def is_run_dir(path: Path) -> bool:
    """An output folder has `llm_completions/`."""
    return (path / "llm_completions").is_dir()


def read_summary(path: Path) -> dict[str, str]:
    """`output.swebench_eval.md` as {instance_id: section}, sections lower-cased ("resolved", ...)."""
    sections: dict[str, str] = {}
    section = ""
    for line in read_text(path).splitlines():
        header = _SECTION.match(line)
        if header:
            section = header.group(1).strip().lower()
            continue
        item = _ITEM.match(line)
        if item and section:
            # An instance can sit in two lists (unresolved and empty patch): the first one is kept.
            sections.setdefault(item.group(1), section)
    return sections


def completion_time(name: str) -> tuple[float, str] | None:
    """A sort key for a completion file's name by the time it ends in (unix seconds, or an ISO
    date-time compared as text); None when the name ends in no time."""
    match = _TIMESTAMP.search(name)
    if match is None:
        return None
    return (float(match.group(1)), "") if match.group(1) else (0.0, match.group(2))


def completion_stem(name: str) -> str:
    """A completion file's name before its time (the model, as OpenHands names them)."""
    match = _TIMESTAMP.search(name)
    return name[: match.start()] if match else name


def latest_completion(files: list[Path]) -> Path | None:
    """The latest of an instance's completion files (by `completion_time`, then name); None if none."""
    return max(files, key=lambda f: (completion_time(f.name) or (0.0, ""), f.name), default=None)


def _last_completion(folder: Path) -> Path | None:
    """The latest completion file of an instance folder."""
    return latest_completion(list(folder.glob("*.json")))


def read_run(path: Path) -> Batch:
    """Every instance of an output folder with its verdict; a missing summary fails the whole run."""
    batch = Batch(str(path), FORMAT)
    summary_file = path / SUMMARY
    if not summary_file.is_file():
        raise IngestError(path, "", f"missing report file {summary_file} (the harness verdicts of this run)")
    verdicts = read_summary(summary_file)
    source_base = _source_base(path)
    for folder in sorted(p for p in (path / "llm_completions").iterdir() if p.is_dir()):
        try:
            batch.trajectories.append(_read_instance(path, folder, verdicts, source_base, batch))
        except IngestError as error:
            batch.skip(error.json_path, error.reason, error.path)
    return batch


def read(file: InputFile) -> Batch:
    """One completion file given on its own: its verdict comes from the output folder around it."""
    path = file.path
    run = path.parent.parent.parent
    if not is_run_dir(run):
        raise IngestError(
            path, "", f"missing report file: no OpenHands output folder ({SUMMARY}) around this completion"
        )
    summary_file = run / SUMMARY
    if not summary_file.is_file():
        raise IngestError(path, "", f"missing report file {summary_file} (the harness verdicts of this run)")
    batch = Batch(str(path), FORMAT)
    batch.trajectories.append(
        _read_instance(run, path.parent, read_summary(summary_file), _source_base(run), batch, path, file.json())
    )
    return batch


def _source_base(run: Path) -> dict[str, str]:
    metadata_file = run / "metadata.json"
    metadata = load_json(metadata_file) if metadata_file.is_file() else {}
    if not isinstance(metadata, dict):
        raise IngestError(metadata_file, "", f"run metadata should be a JSON object (got {preview(metadata)})")
    llm = metadata.get("llm_config")
    return {
        "agent": str(metadata.get("agent_class", "")),
        "model": str(llm.get("model", "")) if isinstance(llm, dict) else "",
    }


def _read_instance(
    run: Path,
    folder: Path,
    verdicts: dict[str, str],
    source_base: dict[str, str],
    batch: Batch,
    completion: Path | None = None,
    document: Any = None,
) -> Trajectory:
    instance_id = folder.name
    completion_file = completion or _last_completion(folder)
    if completion_file is None:
        raise IngestError(folder, "", "no completion file (*.json) for this instance")
    if document is None:
        document = load_json(completion_file)
    if not _is_completion(document):
        raise IngestError(completion_file, "", "not an LLM completion record (needs messages, response, kwargs)")
    try:
        if _final_reply(document["response"], "response") is None:
            raise RecordError("response.choices[0].message", "missing the final reply")
        messages = conversation(document)
    except RecordError as error:
        raise IngestError(completion_file, error.json_path, error.reason) from None
    if instance_id not in verdicts:
        raise IngestError(run / SUMMARY, instance_id, "instance has a trajectory but no verdict in the summary")
    resolved = verdicts[instance_id] == "resolved"
    report = _eval_report(run, instance_id)
    if report is not None and report.resolved != resolved:
        batch.flag(
            [f"{SUMMARY}:{instance_id}", f"output.swebench_eval.logs/instance_{instance_id}.log"],
            f"summary says resolved={resolved}, harness log says resolved={report.resolved}; summary kept",
        )
    source = Source.model_construct(benchmark=BENCHMARK, format=FORMAT, file=str(completion_file), **source_base)
    patch, patch_source = _patch(run, instance_id)
    return swe_trajectory(run.name, instance_id, source, messages, resolved, patch, report, None, patch_source)


def _eval_report(run: Path, instance_id: str) -> HarnessReport | None:
    """The harness report of the eval log, or None when the log has none (evaluation did not finish)."""
    log = run / "output.swebench_eval.logs" / f"instance_{instance_id}.log"
    if not log.is_file():
        return None
    match = _REPORT_LINE.search(read_text(log))
    if match is None:
        return None
    try:
        raw = ast.literal_eval(match.group(1))
        json.dumps(raw, ensure_ascii=False).encode("utf-8")  # JSON-like values and encodable text only
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError) as error:
        raise IngestError(log, "report", f"harness report is not a JSON-like Python literal: {error}") from None
    try:
        return harness_report(raw, instance_id, "report")
    except RecordError as error:
        raise IngestError(log, error.json_path, error.reason) from None


def _patch(run: Path, instance_id: str) -> tuple[str | None, str]:
    """The diff the agent submitted ("" when it was empty) and where it was found; (None, "")
    when the infer log is absent or holds no diff (the patch is unknown)."""
    log = run / "infer_logs" / f"instance_{instance_id}.log"
    if not log.is_file():
        return None, ""
    blocks = _DIFF_BLOCK.findall(read_text(log))
    if not blocks:
        return None, ""
    where = f"infer_logs/instance_{instance_id}.log"
    return (blocks[-1].strip("\n") + "\n" if blocks[-1].strip() else ""), where


def conversation(document: dict[str, Any]) -> list[Message]:
    """The whole conversation of one logged completion, final reply included, as schema messages.

    `fncall_messages` (+ the final reply of `fncall_response`, else that of `response` with its text
    calls parsed) when present, else `messages` (+ that of `response`) with text calls parsed into
    tool calls and their results into tool messages. A record without a final reply gives the
    conversation up to its last request. Raises RecordError naming the JSON path of what is malformed.
    """
    structured = "fncall_messages" in document
    key = "fncall_messages" if structured else "messages"
    reply = "fncall_response" if structured and document.get("fncall_response") is not None else "response"
    raw = document.get(key)
    if not isinstance(raw, list):
        raise RecordError(key, f"{key} should be a list of messages (got {preview(raw)})")
    final = _final_reply(document.get(reply), reply)
    messages = openai_messages(raw, key)
    last = [] if final is None else openai_messages([final], f"{reply}.choices[0]")
    if not structured:
        return text_calls(messages + last)
    if reply == "response":  # the plain reply holds its calls as text
        last = text_calls(messages + last)[len(messages) :]
    return messages + last


def _final_reply(response: Any, where: str) -> dict[str, Any] | None:
    """`response.choices[0].message`, None when the record has no response."""
    if response is None:
        return None
    try:
        final = response["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        raise RecordError(f"{where}.choices[0].message", "missing the final reply") from None
    if not isinstance(final, dict):
        raise RecordError(f"{where}.choices[0].message", f"the final reply should be an object (got {preview(final)})")
    return final


def text_calls(messages: list[Message]) -> list[Message]:
    """Messages with OpenHands text calls made structured: each `<function=NAME>` block of an
    assistant turn without tool calls becomes a ToolCall (id `text-<message>-<n>`, its parameters
    as string arguments) and leaves the text; a user turn "EXECUTION RESULT of [NAME]:" answering
    the oldest pending call becomes that call's tool message. Other messages are returned as given."""
    pending: list[ToolCall] = []
    converted = []
    for index, message in enumerate(messages):
        if message.role == "assistant" and not message.tool_calls and "<function=" in message.content:
            calls = [
                ToolCall(id=f"text-{index}-{n}", name=name, arguments=dict(_parameters(body)))
                for n, (name, body) in enumerate(_TEXT_CALL.findall(message.content))
            ]
            thought = message.content[: message.content.index("<function=")].strip()
            message = message.model_copy(update={"content": thought, "tool_calls": calls})
            pending = list(calls)
        elif message.role == "user" and pending and (result := _RESULT.match(message.content)):
            call = next((c for c in pending if c.name == result.group(1)), pending[0])
            pending.remove(call)
            message = message.model_copy(
                update={"role": "tool", "content": message.content[result.end() :], "tool_call_id": call.id}
            )
        converted.append(message)
    return converted


def _parameters(body: str) -> list[tuple[str, str]]:
    """(name, value) of each `<parameter=NAME>VALUE</parameter>`, values stripped as OpenHands does."""
    return [(name, value.strip()) for name, value in _PARAMETER.findall(body)]
