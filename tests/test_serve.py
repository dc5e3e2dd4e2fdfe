"""The OpenAI-compatible server on the tiny routed folder, driven by the official `openai` client and
by raw HTTP: endpoints, streaming, validation, a bounded queue under 32 concurrent clients.
(Tool calls from a real model over HTTP: tests/test_serve_embedded.py.)"""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from moe_fixtures import FAMILIES

from tracegym.moe_router.chat_api import ChatRequest, StreamWriter, reply_message, to_messages
from tracegym.moe_router.config import ServeConfig
from tracegym.moe_router.server import RunningServer, create_app
from tracegym.synth_envs.registry import make_env
from tracegym.toolcalls import render_tool_call

HELLO = [{"role": "user", "content": "Say hello."}]
pytest_plugins = ("moe_fixtures",)  # the fixtures tiny_adapters and routed_folder


@pytest.fixture(scope="module")
def server(routed_folder):
    app, engine = create_app(str(routed_folder), ServeConfig(model_name="tg", max_tokens=8, max_context=1024))
    with RunningServer(app) as running:
        running.engine = engine
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_models_and_health(server, client):
    ids = [model.id for model in client.models.list()]
    assert ids == ["tg", "tg:task", "tg:base", *(f"tg:{name}" for name in FAMILIES)]
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok" and health["max_queue"] == 64


@pytest.mark.parametrize("model", ["tg", "tg:task", "tg:base", f"tg:{FAMILIES[0]}"])
def test_streaming_gives_the_same_reply_as_a_plain_request(client, model):
    plain = client.chat.completions.create(model=model, messages=HELLO, temperature=0, max_tokens=6)
    assert plain.choices[0].message.role == "assistant" and plain.usage.completion_tokens >= 1
    stream = client.chat.completions.create(
        model=model, messages=HELLO, temperature=0, max_tokens=6, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == plain.choices[0].message.content
    assert finish == [plain.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_bad_requests_get_clear_4xx_answers_and_the_server_keeps_serving(server, client):
    url = f"{server.url}/v1/chat/completions"
    cases = [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "body"),
        (json.dumps({"model": "tg"}).encode(), 400, "messages: Field required"),
        (json.dumps({"model": "tg", "messages": []}).encode(), 400, "messages"),
        (json.dumps({"model": "tg", "messages": [{"role": "wizard", "content": "x"}]}).encode(), 400, "role"),
        (json.dumps({"model": "tg", "messages": HELLO, "n": 2}).encode(), 400, "n:"),
        (json.dumps({"model": "tg", "messages": HELLO, "temperature": -1}).encode(), 400, "temperature"),
        (json.dumps({"model": "tg", "messages": HELLO, "tool_choice": "required"}).encode(), 400, "tool_choice"),
        (
            json.dumps(
                {"model": "tg", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}
            ).encode(),
            400,
            "content",
        ),
        (
            json.dumps(
                {
                    "model": "tg",
                    "messages": [
                        {
                            "role": "assistant",
                            "tool_calls": [
                                {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}
                            ],
                        }
                    ],
                }
            ).encode(),
            400,
            "not JSON",
        ),
        (json.dumps({"model": "gpt-9", "messages": HELLO}).encode(), 404, "model 'gpt-9' not found"),
        (json.dumps({"model": "tg", "messages": HELLO, "max_tokens": 5000}).encode(), 400, "context too long"),
        (
            json.dumps({"model": "tg", "messages": [{"role": "user", "content": "word " * 1100}]}).encode(),
            400,
            "context too long",
        ),
        (b"{" + b" " * 4_100_000 + b"}", 413, "request body over"),
    ]
    for body, status, message in cases:
        response = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=30)
        assert response.status_code == status, (body[:80], response.text)
        error = response.json()["error"]
        assert message in error["message"] and error["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=HELLO)
    assert (
        client.chat.completions.create(model="tg", messages=HELLO, max_tokens=3).choices[0].message.role == "assistant"
    )


def test_a_routed_folder_loads_no_lora_adapters_at_run_time(server, routed_folder):
    for route, body in [
        ("load_lora_adapter", {"lora_name": "x", "lora_path": str(routed_folder / "adapters" / FAMILIES[0])}),
        ("unload_lora_adapter", {"lora_name": FAMILIES[0]}),
    ]:
        response = httpx.post(f"{server.url}/v1/{route}", json=body, timeout=30)
        assert response.status_code == 403 and "routed folder" in response.json()["error"]["message"]
    assert len(httpx.get(f"{server.url}/v1/models").json()["data"]) == 3 + len(FAMILIES)


def test_32_concurrent_clients_get_valid_answers_or_clean_refusals(routed_folder):
    app, engine = create_app(
        str(routed_folder), ServeConfig(model_name="tg", max_tokens=12, max_queue=6, max_context=1024)
    )
    bodies = [
        json.dumps({"model": "tg", "messages": HELLO, "temperature": 0}).encode(),
        json.dumps({"model": "tg:task", "messages": HELLO, "temperature": 0.7, "max_tokens": 4}).encode(),
        json.dumps({"model": f"tg:{FAMILIES[1]}", "messages": HELLO, "stream": True}).encode(),
        b'{"model": "tg", "messages": [{"role": "user", "content": 3}]}',
        b'{"model": "tg", "messages"',
        b"\xff\xfe garbage",
        json.dumps({"model": "tg", "messages": HELLO, "stop": ["a", "b", "c", "d", "e"]}).encode(),
    ]
    statuses: list[int] = []
    problems: list[str] = []
    lock = threading.Lock()

    def client_loop(index: int, url: str, deadline: float) -> None:
        with httpx.Client(timeout=60) as http:
            turn = index
            while time.monotonic() < deadline:
                body = bodies[turn % len(bodies)]
                turn += 1
                response = http.post(url, content=body, headers={"content-type": "application/json"})
                problem = _check(response, body)
                with lock:
                    statuses.append(response.status_code)
                    if problem:
                        problems.append(problem)

    with RunningServer(app) as running:
        url = f"{running.url}/v1/chat/completions"
        deadline = time.monotonic() + 8
        threads = [threading.Thread(target=client_loop, args=(i, url, deadline)) for i in range(32)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(t.is_alive() for t in threads), "a client hung"
        assert not problems, problems[:5]
        assert {200, 400, 503} <= set(statuses) <= {200, 400, 503}
        assert engine.forward_rows > engine.forward_passes  # concurrent requests shared batches
        after = httpx.post(url, json={"model": "tg", "messages": HELLO, "max_tokens": 3}, timeout=60)
        assert after.status_code == 200 and httpx.get(f"{running.url}/health").json()["status"] == "ok"


def _check(response: httpx.Response, body: bytes) -> str | None:
    """Why `response` is not a valid answer or a clean refusal (None when it is)."""
    if response.status_code in (400, 503):
        error = response.json().get("error", {})
        return None if error.get("message") else f"{response.status_code} without a message"
    if response.status_code != 200:
        return f"status {response.status_code}: {response.text[:200]}"
    if b'"stream": true' in body:
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        if events[-1] != "[DONE]" or not any(json.loads(e)["choices"][0].get("finish_reason") for e in events[:-1]):
            return f"unterminated stream: {response.text[-200:]}"
        return None
    choice = response.json()["choices"][0]
    if choice["message"]["role"] != "assistant" or choice["finish_reason"] not in ("stop", "length", "tool_calls"):
        return f"bad completion: {response.text[:200]}"
    return None


def test_tools_render_an_environments_own_system_prompt():
    env = make_env("tool_calling_precision")
    request = ChatRequest.model_validate(
        {
            "model": "m",
            "messages": [{"role": "system", "content": env.instructions}, {"role": "user", "content": "task"}],
            "tools": [{"type": "function", "function": tool} for tool in env.tools],
        }
    )
    messages = to_messages(request)
    assert messages[0].content == env.system_prompt and messages[1].content == "task"
    no_tools = to_messages(request.model_copy(update={"tool_choice": "none"}))
    assert no_tools[0].content == env.instructions


def test_replies_become_openai_tool_calls_and_stream_the_same_way():
    call = render_tool_call("find_room", {"size": 4, "day": "Monday"})
    text = f"Let me look.\n{call}"
    message, has_calls = reply_message(text)
    assert has_calls and message["content"] == "Let me look."
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"size": 4, "day": "Monday"}
    assert message["tool_calls"][0]["function"]["name"] == "find_room"
    assert reply_message('<tool_call>{"name": broken</tool_call>') == (
        {"role": "assistant", "content": '<tool_call>{"name": broken</tool_call>'},
        False,
    )
    for reply in (text, "Plain answer, no call.", call):
        writer, chunks = StreamWriter("m"), []
        for end in range(1, len(reply) + 1):  # one character at a time
            chunk = writer.update(reply[:end])
            chunks += [chunk] if chunk else []
        chunks += writer.finish(reply, "stop")
        deltas = [c["choices"][0]["delta"] for c in chunks]
        streamed = "".join(d.get("content", "") for d in deltas)
        expected, calls = reply_message(reply)
        assert streamed == (expected["content"] or "")
        assert "<tool_call" not in streamed
        sent_calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
        assert [c["function"] for c in sent_calls] == [c["function"] for c in expected.get("tool_calls", [])]
        assert chunks[-1]["choices"][0]["finish_reason"] == ("tool_calls" if calls else "stop")


def test_stop_strings_end_the_reply_and_are_left_out(client):
    model = f"tg:{FAMILIES[0]}"  # the random adapter says words (the tiny base only newlines)
    plain = client.chat.completions.create(model=model, messages=HELLO, temperature=0, max_tokens=8)
    text = plain.choices[0].message.content
    stop = text[len(text) // 2 :][:3]  # a piece of what the model says greedily
    assert stop.strip() and text.index(stop) > 0
    cut = client.chat.completions.create(model=model, messages=HELLO, temperature=0, max_tokens=8, stop=[stop])
    assert cut.choices[0].message.content == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model=model, messages=HELLO, temperature=0, max_tokens=8, stop=stop, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == text[: text.index(stop)]
