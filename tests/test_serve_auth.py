"""`tracegym serve` with an API key: every route but /health wants `Authorization: Bearer KEY`
(401 with an OpenAI-style error otherwise), the `openai` client with the key works, the key comes
from --api-key or $TRACEGYM_API_KEY and is never printed, and a non-loopback address without a
key is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import openai
import pytest
from moe_fixtures import served_url

from tracegym.cli import build_parser, main
from tracegym.moe_router.config import API_KEY_ENV, ServeConfig, is_loopback
from tracegym.moe_router.serve_cli import serve_config
from tracegym.moe_router.server import RunningServer, create_app

KEY = "tg-test-7f3a9c1e5b"
HELLO = [{"role": "user", "content": "Say hello."}]
pytest_plugins = ("moe_fixtures",)  # the fixtures tiny_adapters and routed_folder


@pytest.fixture(scope="module")
def server(routed_folder: Path):
    app, _ = create_app(str(routed_folder), ServeConfig(model_name="tg", max_tokens=4, max_context=1024, api_key=KEY))
    with RunningServer(app) as running:
        yield running


def _refusals(url: str, headers: dict[str, str]) -> list[httpx.Response]:
    """The answers to a request on each route but /health (and to an unknown one) with `headers`."""
    body = {"model": "tg", "messages": HELLO, "max_tokens": 2}
    return [
        httpx.get(f"{url}/v1/models", headers=headers),
        httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers),
        httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": True}, headers=headers),
        httpx.get(f"{url}/openapi.json", headers=headers),
        httpx.get(f"{url}/docs", headers=headers),
        httpx.get(f"{url}/no/such/route", headers=headers),
        httpx.post(f"{url}/v1/chat/completions", content=b"{" + b" " * 4_100_000 + b"}", headers=headers),
    ]


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        ({}, "missing API key"),
        ({"Authorization": "Bearer wrong-key"}, "invalid API key"),
        ({"Authorization": f"Bearer {KEY}x"}, "invalid API key"),
        ({"Authorization": f"Basic {KEY}"}, "invalid API key"),
        ({"Authorization": KEY}, "invalid API key"),
        ({"X-Api-Key": KEY}, "missing API key"),
    ],
    ids=["none", "wrong", "longer", "not bearer", "no scheme", "another header"],
)
def test_requests_without_the_key_get_401(server: RunningServer, headers: dict[str, str], problem: str) -> None:
    for response in _refusals(server.url, headers):
        assert response.status_code == 401, (response.request.url, response.text[:200])
        error = response.json()["error"]
        assert problem in error["message"] and "Authorization: Bearer KEY" in error["message"]
        assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
        assert response.headers["www-authenticate"] == "Bearer"
        assert KEY not in response.text


def test_health_answers_without_the_key(server: RunningServer) -> None:
    response = httpx.get(f"{server.url}/health")
    assert response.status_code == 200 and response.json()["status"] == "ok"


def test_the_openai_client_with_the_key_works(server: RunningServer) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=60)
    assert "tg" in [model.id for model in client.models.list()]
    reply = client.chat.completions.create(model="tg", messages=HELLO, temperature=0, max_tokens=3)
    assert reply.choices[0].message.role == "assistant" and reply.usage.completion_tokens >= 1
    stream = client.chat.completions.create(model="tg:base", messages=HELLO, max_tokens=3, stream=True)
    assert [c.choices[0].finish_reason for c in stream if c.choices and c.choices[0].finish_reason]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).models.list()


def test_a_non_loopback_address_without_a_key_is_refused(
    routed_folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    for host in ("0.0.0.0", "::", "192.168.1.7", "example.org"):
        assert main(["serve", str(routed_folder), "--host", host, "--port", "0"]) == 1
        error = capsys.readouterr().err
        assert f"refusing to serve on {host} without an API key" in error and API_KEY_ENV in error
    loopback = ["127.0.0.1", "127.0.0.2", "::1", "localhost", "LOCALHOST"]
    assert all(is_loopback(host) for host in loopback)
    assert not any(is_loopback(host) for host in ("0.0.0.0", "::", "10.0.0.1", "localhost.example.org", ""))
    ServeConfig(host="0.0.0.0", api_key=KEY).check_exposure()  # with a key: allowed
    ServeConfig(host="::1").check_exposure()


def test_the_key_comes_from_the_flag_else_the_environment_and_must_fit_a_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def config(*flags: str) -> ServeConfig:
        return serve_config(build_parser("serve").parse_args(["serve", "folder", *flags]))

    monkeypatch.delenv(API_KEY_ENV, raising=False)
    assert config().api_key is None
    monkeypatch.setenv(API_KEY_ENV, "")
    assert config().api_key is None  # empty counts as unset
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    assert config().api_key == "from-env" and config("--api-key", "from-flag").api_key == "from-flag"
    for bad in ("", "with space", "tab\tkey", "kéy"):
        with pytest.raises(ValueError, match="printable ASCII"):
            ServeConfig(api_key=bad)
    assert KEY not in repr(ServeConfig(api_key=KEY)) and KEY not in str(ServeConfig(api_key=KEY))


def test_the_command_serves_with_the_key_from_the_environment_and_never_prints_it(
    routed_folder: Path,
) -> None:
    env = {**os.environ, API_KEY_ENV: KEY}
    command = [sys.executable, "-m", "tracegym.cli", "serve", str(routed_folder), "--port", "0", "--model-name", "tg"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
    reader.start()
    try:
        url = served_url(lines, process, 120)
        assert httpx.get(f"{url}/v1/models").status_code == 401
        assert httpx.get(f"{url}/health").status_code == 200
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)
        assert client.chat.completions.create(model="tg", messages=HELLO, max_tokens=2).choices
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        reader.join(10)
    output = "".join(lines)
    assert process.returncode == 0, output[-2000:]
    assert "(API key required;" in output and KEY not in output
