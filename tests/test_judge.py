"""The LLM judge, attribution and proposer end to end against a stand-in OpenAI-protocol HTTP server.

The server is a real `http.server` on 127.0.0.1 (in a thread) answering POST /v1/chat/completions.
It decides from the transcript: tool_calling_precision is LACKING when a tool result shows
"ERROR"; transcripts holding MALFORMED_ONCE get a broken answer on their first attempt;
ALWAYS_MALFORMED ones always get broken or schema-violating answers (counted per kind of question
and labelling run); FLAKY ones get LACKING in run 2 only (the vote must keep PRESENT).
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tracegym.analysis.catalogue import catalogue_for
from tracegym.analysis.contrast import contrast
from tracegym.analysis.diagnose import DiagnoseConfig, diagnose
from tracegym.analysis.judge import JudgeConfig, JudgeError, LLMJudge
from tracegym.analysis.llm_client import OpenAIChatClient
from tracegym.analysis.proposer import propose
from tracegym.analysis.selection import SelectionConfig
from tracegym.cli import main
from tracegym.schema import LabelValue, Message, Source, ToolCall, Trajectory, write_jsonl


class StandIn(BaseHTTPRequestHandler):
    requests: list[dict] = []
    seen: Counter = Counter()
    lock = threading.Lock()

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            self.requests.append(body)
            transcript = body["messages"][1]["content"]
            key = (body["response_format"]["json_schema"]["name"], transcript, body["seed"] // 1000)
            self.seen[key] += 1
            attempt = self.seen[key]
        content = self.answer(body, transcript, attempt)
        reply = {
            "id": "x",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def answer(self, body: dict, transcript: str, attempt: int) -> str:
        kind = body["response_format"]["json_schema"]["name"]
        if "ALWAYS_MALFORMED" in transcript:
            return "not json {" if attempt % 2 else json.dumps({"verdicts": []})
        if "MALFORMED_ONCE" in transcript and attempt == 1:
            return '```json\n{"verdicts": [ broken'
        if kind == "Proposal":
            return json.dumps(
                {
                    "capabilities": [
                        {
                            "name": "Tool-Calling Precision",
                            "description": "calling tools right",
                            "example_tasks": ["1"],
                        },
                        {
                            "name": "argument_exactness",
                            "description": "Calling tools with exactly the right names, argument types, "
                            "formats and identifiers, so that calls succeed the first time.",
                            "example_tasks": ["2"],
                        },
                        {
                            "name": "error_recovery",
                            "description": "Reacting to a tool error by fixing the request and retrying "
                            "instead of giving up or repeating it.",
                            "example_tasks": ["3"],
                        },
                    ]
                }
            )
        error_line = next((int(m) for m in re.findall(r"^\[(\d+)\] tool: ERROR", transcript, re.MULTILINE)), None)
        if kind == "SourceAnswer":
            return json.dumps(
                {
                    "source": "user_simulator" if "INVENTED" in transcript else "agent",
                    "reason": "stand-in",
                    "message_index": 0,
                    "quote": "please check flight",
                }
            )
        names = re.findall(r"^- (\w+): ", body["messages"][0]["content"].split("Capabilities:")[1], re.MULTILINE)
        run = body["seed"] // 1000
        verdicts = []
        for name in names:
            lacking = name == "tool_calling_precision" and (
                error_line is not None or ("FLAKY" in transcript and run == 2)
            )
            index = error_line if lacking and error_line is not None else (1 if lacking else None)
            quote = ("ERROR no such flight" if error_line is not None else "CALL get_flight_status") if lacking else ""
            if "MISQUOTE" in transcript and lacking:
                quote = "ERROR no such train"  # not in the cited message: the answer must be refused
            verdicts.append(
                {
                    "capability": name,
                    "value": "LACKING" if lacking else "PRESENT",
                    "message_index": index,
                    "quote": quote,
                }
            )
        return json.dumps({"verdicts": verdicts})


@pytest.fixture()
def server():
    StandIn.requests, StandIn.seen = [], Counter()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def trajectory(task: int, agent: str, success: bool, note: str = "") -> Trajectory:
    messages = [
        Message(role="user", content=f"please check flight HAT{task} {note}"),
        Message(
            role="assistant",
            tool_calls=[ToolCall(id="c1", name="get_flight_status", arguments={"flight": f"HAT{task}"})],
        ),
        Message(role="tool", tool_call_id="c1", content="ok" if success else "no such flight", error=not success),
        Message(role="assistant", content="done"),
    ]
    return Trajectory(
        id=f"{agent}/{task}",
        task_id=str(task),
        source=Source(benchmark="tau2-test", format="tau2_results", file="x", agent=agent),
        messages=messages,
        reward=float(success),
        success=success,
        termination_reason="user_stop",
        diagnostics={"gold_actions": []},
        metadata={"domain": "test"},
    )


def dataset() -> list[Trajectory]:
    runs = []
    for task in range(6):
        runs.append(trajectory(task, "good", True, "FLAKY" if task < 3 else ""))
        runs.append(
            trajectory(task, "bad", False, "MALFORMED_ONCE" if task == 1 else ("INVENTED" if task == 5 else ""))
        )
    runs.append(trajectory(9, "bad", False, "ALWAYS_MALFORMED"))
    return runs


def test_judge_end_to_end_with_retries_votes_and_counted_malformed(server: str, tmp_path: Path) -> None:
    trajectories = dataset()
    judge = LLMJudge(OpenAIChatClient(server, "stand-in-judge"), JudgeConfig(runs=3, retries=2, workers=3))
    diagnosis = diagnose(
        trajectories, [tmp_path], DiagnoseConfig(selection=SelectionConfig(k=2, n=3, bootstrap=200)), judge=judge
    )
    report = diagnosis.report

    labels = diagnosis.judge["labels"]
    assert labels.malformed == 3  # the ALWAYS_MALFORMED run, once per labelling run, after 2 retries each
    assert labels.retried == 3 * 2 + 3  # those retries plus one MALFORMED_ONCE retry per run
    assert diagnosis.judge["attribution"].retried == 2 + 1 and diagnosis.judge["attribution"].malformed == 1
    assert labels.calls == 13 * 3 + labels.retried
    assert not [label for label in labels.labels if label.trajectory_id == "bad/9"]
    assert {label.run for label in labels.labels} == {0, 1, 2}
    assert all(label.labeller == "judge:stand-in-judge" for label in labels.labels)

    body = next(r for r in StandIn.requests if r["response_format"]["json_schema"]["name"] == "LabelAnswer")
    assert body["model"] == "stand-in-judge"
    assert body["response_format"]["type"] == "json_schema" and body["response_format"]["json_schema"]["strict"] is True
    assert "when you are unsure, answer PRESENT" in body["messages"][0]["content"]
    assert "How careful readers tell the capabilities apart on τ-bench" in body["messages"][0]["content"]
    # The judge reads the case file a careful reader has before the transcript, every tool result whole.
    sent = body["messages"][1]["content"]
    assert sent.startswith("## Gold actions") and "- none: the task expects no action" in sent
    assert "## Transcript\n[0] user: please check flight" in sent and "[2] tool: " in sent
    source = next(r for r in StandIn.requests if r["response_format"]["json_schema"]["name"] == "SourceAnswer")
    assert "## Outcome\nreward 0.0" in source["messages"][1]["content"]

    stats = {s.capability.name: s for s in report.capabilities}
    precision = stats["tool_calling_precision"]
    assert report.selected == ["tool_calling_precision"]
    assert precision.runs_passed == 3
    # FLAKY successes are LACKING in run 2 only: ER+ is 3/6 there, 0 elsewhere; the vote keeps PRESENT.
    assert precision.er_plus == [0.0, 0.0, 0.5]
    assert (
        precision.explained_failures
        and precision.explained_failures[0]["evidence"][0]["quote"] == "ERROR no such flight"
    )
    assert stats["policy_compliance"].selected is False

    # Attribution: the INVENTED failure is the user simulator's and is left out of the statistics.
    assert diagnosis.sources["bad/5"].source == "user_simulator" and diagnosis.sources["bad/5"].method == "judge"
    assert report.failure_sources == {"agent": 6, "user_simulator": 1, "benchmark": 0}
    assert report.params["counted_failures"] == 6
    assert report.params["judge"]["model"] == "stand-in-judge" and report.params["judge"]["labels_malformed"] == 3
    # The prompt recorded is the one the labelling requests were sent with.
    assert report.params["judge"]["prompt"] == body["messages"][0]["content"]


def test_a_quote_not_in_the_cited_message_is_a_malformed_answer(server: str) -> None:
    judge = LLMJudge(OpenAIChatClient(server, "stand-in-judge"), JudgeConfig(runs=1, retries=1, workers=1))
    result = judge.label(
        [trajectory(3, "bad", False, "MISQUOTE"), trajectory(4, "bad", False)], catalogue_for({"tau2-test"})
    )
    assert result.malformed == 1 and result.retried == 1 and "does not occur in message 2" in result.errors[0]
    assert {label.trajectory_id for label in result.labels} == {"bad/4"}
    assert {e.quote for label in result.labels for e in label.evidence if e.quote} == {"ERROR no such flight"}


def test_with_fewer_questions_than_the_first_eight_malformed_answers_are_counted_not_fatal(server: str) -> None:
    judge = LLMJudge(OpenAIChatClient(server, "stand-in-judge"), JudgeConfig(runs=1, retries=1, workers=1))
    broken = [trajectory(9, "bad", False, "ALWAYS_MALFORMED")]
    found, attributed = judge.attribute_failures(broken)
    assert found == {} and attributed.malformed == 1 and attributed.calls == 2
    labelled = judge.label(broken + [trajectory(4, "bad", False)], catalogue_for({"tau2-test"}))
    assert labelled.malformed == 1 and {label.trajectory_id for label in labelled.labels} == {"bad/4"}
    assert judge.label(broken, catalogue_for({"tau2-test"})).malformed == 1


def test_an_unreachable_judge_stops_with_one_error_naming_the_url(tmp_path: Path) -> None:
    judge = LLMJudge(
        OpenAIChatClient("http://127.0.0.1:9/v1", "nobody", timeout=2, max_retries=1),
        JudgeConfig(runs=2, retries=1, workers=2),
    )
    with pytest.raises(
        JudgeError, match=r"http://127\.0\.0\.1:9/v1/chat/completions: cannot connect \(2 tries\)"
    ) as stopped:
        judge.label(dataset()[:2], catalogue_for({"tau2-airline"}))
    assert "0 of 4 questions answered" in str(stopped.value) and stopped.value.result.labels == []
    assert stopped.value.result.malformed == 0  # not counted as the model's fault: the endpoint failed


def test_proposer_deduplicates_against_the_catalogue(server: str) -> None:
    trajectories = dataset()
    known = catalogue_for({"tau2-airline"})
    proposed = propose(
        OpenAIChatClient(server, "stand-in-judge"), contrast(trajectories), {t.id: t for t in trajectories}, known
    )
    assert [c.name for c in proposed] == ["error_recovery"]
    assert proposed[0].origin == "proposed" and proposed[0].examples == ["3"]
    system = next(r for r in StandIn.requests if r["response_format"]["json_schema"]["name"] == "Proposal")["messages"][
        0
    ]["content"]
    assert "tool_calling_precision" in system


def test_cli_with_judge_and_proposer_from_ingested_jsonl(server: str, tmp_path: Path, capsys) -> None:
    write_jsonl(dataset(), tmp_path / "trajectories.jsonl")
    out = tmp_path / "out"
    code = main(
        [
            "diagnose",
            str(tmp_path / "trajectories.jsonl"),
            "--out",
            str(out),
            "--judge-url",
            server,
            "--judge-model",
            "stand-in-judge",
            "--judge-runs",
            "8",
            "--propose",
            "--bootstrap",
            "100",
        ]
    )
    assert code == 0
    report = json.loads((out / "capabilities.json").read_text())
    # K defaults to 80% of N rounded up: 6.4 -> 7 (K = N, rounding down or to the nearest give 8 or 6).
    assert report["params"]["k"] == 7 and report["params"]["n"] == 8
    assert "error_recovery" in {c["capability"]["name"] for c in report["capabilities"]}
    markdown = (out / "report.md").read_text()
    assert "## LLM judge" in markdown and "stand-in-judge" in markdown and "## Proposed capabilities" in markdown
    labels = [json.loads(line) for line in (out / "labels.jsonl").read_text().splitlines()]
    assert {LabelValue(label["value"]) for label in labels} >= {LabelValue.PRESENT, LabelValue.LACKING}


def test_local_backend_judge_stops_when_no_answer_is_usable(tiny) -> None:
    """A generation backend (the tiny random model, which cannot write JSON) through the same judge:
    every question malformed, so it stops once the first eight are settled."""
    from tracegym.analysis.llm_client import BackendChatClient
    from tracegym.generation import HFBackend

    model, tokenizer = tiny
    client = BackendChatClient(HFBackend(model, tokenizer), "tiny-random", max_new_tokens=8)
    with pytest.raises(JudgeError, match="none of the first 8 questions got a usable answer") as stopped:
        LLMJudge(client, JudgeConfig(runs=2, retries=0, workers=1)).label(dataset()[:4], catalogue_for({"tau2-test"}))
    result = stopped.value.result
    assert result.labels == [] and result.malformed == 8 and result.calls == 8 and result.retried == 0
    assert result.model == "tiny-random"
