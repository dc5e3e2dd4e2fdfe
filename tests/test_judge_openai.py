"""The judge through the official `openai` client against a local fake OpenAI-compatible server.

The fake is a real `http.server` on 127.0.0.1 (in a thread) answering POST /v1/chat/completions
through a per-test `respond(body, headers, number)` returning (status, payload); header names
are lower-cased. Nothing leaves
the machine and no language model is loaded.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from benchmark_modules import load_benchmark
from test_judge import dataset, trajectory

from tracegym.analysis.catalogue import catalogue_for
from tracegym.analysis.judge import JudgeConfig, JudgeError, connect, judged_text
from tracegym.analysis.judge_case import message_text
from tracegym.cli import main
from tracegym.schema import Trajectory, write_jsonl

Respond = Callable[[dict, dict, int], tuple[int, object]]


class Fake:
    """The server's state: the requests seen (body, headers, path) and how to answer the next."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict, dict, str]] = []
        self.respond: Respond = lambda body, headers, number: (200, reply(verdicts(body)))
        self.release = threading.Event()  # set at teardown: frees handlers told to hang
        self.lock = threading.Lock()
        self.url = ""


def reply(content: str) -> dict:
    """A chat.completion whose one choice says `content`."""
    message = {"role": "assistant", "content": content}
    return {
        "id": "fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
    }


def error_body(message: str, code: str) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code}}


def shown_messages(body: dict) -> dict[int, str]:
    """The transcript lines the judge was shown, by message index."""
    transcript = body["messages"][1]["content"].split("## Transcript\n", 1)[1]
    return {int(m[1]): m[2] for m in re.finditer(r"^\[(\d+)\] \w+: (.*)$", transcript, re.MULTILINE)}


def capability_names(body: dict) -> list[str]:
    return re.findall(r"^- (\w+): ", body["messages"][0]["content"].split("Capabilities:")[1], re.MULTILINE)


def verdicts(body: dict, quote: Callable[[str], str] = lambda text: text[:12]) -> str:
    """A usable answer: the first capability LACKING, quoting (by `quote`) the last message shown,
    the others PRESENT quoting the first; a SourceAnswer blaming the agent."""
    shown = shown_messages(body)
    first, last = min(shown), max(shown)
    if body["response_format"]["json_schema"]["name"] == "SourceAnswer":
        return json.dumps({"source": "agent", "reason": "fake", "message_index": last, "quote": quote(shown[last])})
    names = capability_names(body)
    return json.dumps(
        {
            "verdicts": [
                {
                    "capability": name,
                    "value": "LACKING" if n == 0 else "PRESENT",
                    "message_index": last if n == 0 else first,
                    "quote": quote(shown[last if n == 0 else first]),
                }
                for n, name in enumerate(names)
            ]
        }
    )


@pytest.fixture()
def fake(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    state = Fake()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                headers = {key.lower(): value for key, value in self.headers.items()}
                state.requests.append((body, headers, self.path))
                number = len(state.requests)
            status, payload = state.respond(body, headers, number)
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up waiting (the hung-server test)
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()


def runs(count: int) -> list[Trajectory]:
    return [trajectory(task, "bad", False) for task in range(count)]


CAPABILITIES = catalogue_for({"tau2-test"})


def test_a_judge_run_end_to_end_gives_labels_whose_quotes_are_verbatim(fake: Fake) -> None:
    judge = connect(JudgeConfig(url=fake.url, model="fake-judge", api_key="secret", runs=2, workers=2))
    trajectories = runs(3)
    result = judge.label(trajectories, CAPABILITIES)
    assert len(result.labels) == 3 * 2 * len(CAPABILITIES) and result.malformed == result.retried == 0
    by_id = {t.id: t for t in trajectories}
    for label in result.labels:
        (evidence,) = label.evidence
        assert evidence.quote and evidence.quote in message_text(
            by_id[label.trajectory_id].messages[evidence.message_index]
        )
    body, headers, path = fake.requests[0]
    assert path == "/v1/chat/completions" and headers["authorization"] == "Bearer secret"
    assert body["model"] == "fake-judge" and body["seed"] in (0, 1000) and body["temperature"] == 0.7
    assert body["response_format"]["type"] == "json_schema" and body["response_format"]["json_schema"]["strict"]
    assert "api_key" not in repr(judge.config) and "secret" not in repr(judge.config)


def test_a_quote_not_in_the_cited_message_is_refused_and_asked_again(fake: Fake) -> None:
    def respond(body: dict, headers: dict, number: int) -> tuple[int, object]:
        if number % 2:  # every first try of a question: a quote the cited message does not hold
            return 200, reply(verdicts(body, quote=lambda text: "I have cancelled your reservation"))
        return 200, reply(verdicts(body, quote=lambda text: "  ".join(text[:20].split())))  # spacing differs: fine

    fake.respond = respond
    trajectories = runs(2)
    result = connect(JudgeConfig(url=fake.url, runs=1, retries=1, workers=1)).label(trajectories, CAPABILITIES)
    assert result.retried == 2 and result.malformed == 0 and len(fake.requests) == 4
    assert all("does not occur in message" in error for error in result.errors)
    by_id = {t.id: t for t in trajectories}
    for label in result.labels:
        (evidence,) = label.evidence
        said = " ".join(evidence.quote.split())
        assert said and said in message_text(by_id[label.trajectory_id].messages[evidence.message_index])


def test_a_server_error_is_retried_by_the_client_and_one_that_persists_stops_the_judge(fake: Fake) -> None:
    fake.respond = lambda body, headers, number: (
        (500, error_body("engine restarting", "server_error")) if number == 1 else (200, reply(verdicts(body)))
    )
    judge = connect(JudgeConfig(url=fake.url, runs=1, workers=1, request_retries=2))
    result = judge.label(runs(2), CAPABILITIES)
    assert len(fake.requests) == 3  # the 500, then 200 for the same question, then the second question
    assert result.calls == 2 and result.retried == 0 and len(result.labels) == 2 * len(CAPABILITIES)

    fake.requests.clear()
    fake.respond = lambda body, headers, number: (503, error_body("overloaded", "server_error"))
    with pytest.raises(JudgeError, match=r"/v1/chat/completions: HTTP 503: overloaded \(2 tries\)"):
        connect(JudgeConfig(url=fake.url, runs=1, workers=1, request_retries=1)).label(runs(2), CAPABILITIES)
    assert len(fake.requests) == 2  # one question, tried twice; the second never asked


def test_a_hung_server_times_out_with_a_clear_error(fake: Fake) -> None:
    def hang(body: dict, headers: dict, number: int) -> tuple[int, object]:
        fake.release.wait(30)
        return 200, reply(verdicts(body))

    fake.respond = hang
    judge = connect(JudgeConfig(url=fake.url, runs=1, workers=1, timeout=0.5, request_retries=1))
    started = time.monotonic()
    with pytest.raises(JudgeError) as stopped:
        judge.label(runs(3), CAPABILITIES)
    assert time.monotonic() - started < 10
    assert f"{fake.url}/chat/completions: no reply within 0.5 s (2 tries)" in str(stopped.value)
    assert "0 of 3 questions answered" in str(stopped.value) and len(fake.requests) == 2


def test_a_refused_key_is_one_clear_cli_error_and_the_key_comes_from_the_flag_or_the_environment(
    fake: Fake, tmp_path: Path, capsys, monkeypatch
) -> None:
    def respond(body: dict, headers: dict, number: int) -> tuple[int, object]:
        if headers.get("authorization") != "Bearer right":
            return 401, error_body("Incorrect API key provided: wr***ng.", "invalid_api_key")
        return 200, reply(verdicts(body))

    fake.respond = respond
    write_jsonl(dataset()[:4], tmp_path / "trajectories.jsonl")
    out = tmp_path / "out"
    argv = ["diagnose", str(tmp_path / "trajectories.jsonl"), "--out", str(out), "--judge-url", fake.url]
    argv += ["--judge-runs", "1", "--bootstrap", "50"]
    assert main([*argv, "--judge-api-key", "wrong"]) == 1
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "error:" in line]  # beside progress bars, one error line
    assert line.startswith("tracegym diagnose: error: LLM judge stopped")
    assert f"{fake.url}/chat/completions: the API key was refused (HTTP 401: Incorrect API key provided" in line
    assert "Traceback" not in err
    assert not (out / "capabilities.json").exists()
    assert main([*argv, "--judge-api-key", "right"]) == 0
    monkeypatch.setenv("OPENAI_API_KEY", "right")
    assert main(argv) == 0
    assert all(h["authorization"] == "Bearer right" for _, h, _ in fake.requests[-4:])


def test_a_model_the_server_does_not_know_is_named(fake: Fake) -> None:
    fake.respond = lambda body, headers, number: (
        404,
        error_body(f"The model `{body['model']}` does not exist.", "model_not_found"),
    )
    with pytest.raises(
        JudgeError, match=r"the server knows no model 'nope'.*HTTP 404: The model `nope` does not exist"
    ):
        connect(JudgeConfig(url=fake.url, model="nope", runs=1)).label(runs(1), CAPABILITIES)


def test_a_model_that_never_answers_in_the_schema_stops_the_judge_early(fake: Fake) -> None:
    fake.respond = lambda body, headers, number: (200, reply('{"verdicts": [ broken'))
    judge = connect(JudgeConfig(url=fake.url, model="chatty", runs=1, retries=1, workers=1))
    with pytest.raises(JudgeError) as stopped:
        judge.label(runs(20), CAPABILITIES)
    message = str(stopped.value)
    assert (
        f"{fake.url}/chat/completions: none of the first 8 questions got a usable answer from model 'chatty'" in message
    )
    assert "last: run 0 attempt 1: LabelAnswer: Invalid JSON" in message
    # The question the worker had begun meanwhile is kept; the others are never asked.
    assert 8 <= stopped.value.result.malformed <= 9 and len(fake.requests) == 2 * stopped.value.result.malformed


def test_answers_before_a_failure_are_kept_in_the_journal_and_a_rerun_asks_only_the_rest(
    fake: Fake, tmp_path: Path
) -> None:
    journal = tmp_path / "judge" / "answers.jsonl"
    fake.respond = lambda body, headers, number: (
        (200, reply(verdicts(body))) if number <= 3 else (401, error_body("key revoked", "invalid_api_key"))
    )
    config = JudgeConfig(url=fake.url, runs=1, workers=1, journal=str(journal))
    trajectories = runs(6)
    with pytest.raises(JudgeError, match=f"3 of 6 questions answered, their answers are kept in {journal}") as stopped:
        connect(config).label(trajectories, CAPABILITIES)
    assert {label.trajectory_id for label in stopped.value.result.labels} == {t.id for t in trajectories[:3]}
    assert len(journal.read_text().splitlines()) == 3

    fake.requests.clear()
    fake.respond = lambda body, headers, number: (200, reply(verdicts(body)))
    judge = connect(config)
    result = judge.label(trajectories, CAPABILITIES)
    assert result.reused == 3 and result.calls == 3 and len(fake.requests) == 3
    asked = {r[0]["messages"][1]["content"] for r in fake.requests}
    assert asked == {judged_text(t) for t in trajectories[3:]}
    assert len(result.labels) == 6 * len(CAPABILITIES) and len(journal.read_text().splitlines()) == 6
    again = judge.label(trajectories, CAPABILITIES)  # the same judge asks nothing twice
    assert again.reused == 6 and again.calls == 0 and len(fake.requests) == 3


def test_the_agreement_benchmark_measures_the_judge_with_the_same_table(fake: Fake, shared_data: Path, capsys) -> None:
    """A judge that answers the reference labels agrees perfectly: κ3 +1.00 wherever κ is defined."""
    if not (shared_data / "tau2" / "results").is_dir():
        pytest.skip("τ² runs absent")
    bench = load_benchmark("diagnosis_agreement")
    items = bench.load_items("tune", shared_data, 6)
    entries = {judged_text(i.trajectory): (i.entry, i.trajectory) for i in items}

    def reference_answer(body: dict, headers: dict, number: int) -> tuple[int, object]:
        entry, run = entries[body["messages"][1]["content"]]

        def evidence(index: int | None) -> tuple[int, str]:
            index = index if index is not None else 0
            return index, message_text(run.messages[index])[:30]

        if body["response_format"]["json_schema"]["name"] == "SourceAnswer":
            index, quote = evidence(None)
            source = entry["failure_source"] or "agent"
            return 200, reply(json.dumps({"source": source, "reason": "ref", "message_index": index, "quote": quote}))
        answer = []
        for name in capability_names(body):
            given = entry["labels"].get(name, {"label": "NA", "msg_idx": None})
            index, quote = evidence(given["msg_idx"]) if given["label"] == "LACKING" else (None, "")
            answer.append({"capability": name, "value": given["label"], "message_index": index, "quote": quote})
        return 200, reply(json.dumps({"verdicts": answer}))

    fake.respond = reference_answer
    argv = ["--split", "tune", "--round", "6", "--judge-url", fake.url, "--judge-model", "reader", "--judge-runs", "1"]
    assert bench.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"{len(items)} trajectories" in lines[0] and "labeller judge:reader" in lines[0]
    table = lines[lines.index(next(line for line in lines if line.startswith("capability"))) + 1 :]
    rows = [line.split() for line in table[: table.index("confusion matrices (3-class, pooled):")]]
    assert [row[0] for row in rows] == list(items[0].entry["labels"])
    assert all(row[1] in ("+1.00", "–") for row in rows) and any(row[1] == "+1.00" for row in rows)
    # One question per item and per undetermined failure: the selection passes reuse the answers.
    failures = sum(not i.trajectory.success for i in items)
    assert len(items) <= len(fake.requests) <= len(items) + failures
