"""OpenHands SWE-bench output folders: `llm_completions/<id>/*.json` + `output.swebench_eval.md`.

The last completion file of an instance holds the whole conversation (`messages`) and the final
reply (`response.choices[0].message`). The verdict comes from `output.swebench_eval.md` (resolved /
unresolved / empty-patch lists); test results from the harness `report: {...}` line of
`output.swebench_eval.logs/instance_<id>.log`; the submitted diff from the "Got git diff" block of
`infer_logs/instance_<id>.log`. Cross-reference check: the eval log's `resolved` agrees with the
summary (the summary is kept when they differ: it is what the benchmark reported).
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
from tracegym.schema import Source, Trajectory

FORMAT = "openhands"
SUMMARY = "output.swebench_eval.md"
_SECTION = re.compile(r"^## (.+?) Instances\s*$")
_ITEM = re.compile(r"^- \[([^\]]+)\]")
_REPORT_LINE = re.compile(r"report: (\{.*\})\s*$", re.MULTILINE)
_DIFF_BLOCK = re.compile(r"Got git diff for instance [^\n]*:\n-{8}\n(.*?)-{8}\n", re.DOTALL)
_TIMESTAMP = re.compile(r"-(\d+(?:\.\d+)?)\.json$")


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


def _last_completion(folder: Path) -> Path | None:
    """The latest completion file of an instance (file names end in -<unix time>.json)."""

    def key(file: Path) -> tuple[float, str]:
        match = _TIMESTAMP.search(file.name)
        return (float(match.group(1)) if match else 0.0, file.name)

    files = sorted(folder.glob("*.json"), key=key)
    return files[-1] if files else None


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
        final = document["response"]["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        raise IngestError(completion_file, "response.choices[0].message", "missing the final reply") from None
    if not isinstance(document["messages"], list):
        raise IngestError(
            completion_file, "messages", f"messages should be a list (got {preview(document['messages'])})"
        )
    try:
        messages = openai_messages([*document["messages"], final], "messages")
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
    return swe_trajectory(run.name, instance_id, source, messages, resolved, _patch(run, instance_id), report, None)


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


def _patch(run: Path, instance_id: str) -> str:
    """The diff the agent submitted ("" when the infer log is absent or the diff was empty)."""
    log = run / "infer_logs" / f"instance_{instance_id}.log"
    if not log.is_file():
        return ""
    blocks = _DIFF_BLOCK.findall(read_text(log))
    return blocks[-1].strip("\n") + "\n" if blocks and blocks[-1].strip() else ""
