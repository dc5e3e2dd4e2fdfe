"""`tracegym serve` on a base model (the tiny test model) with LoRA adapters: adapters loaded at
start and at run time through vLLM's endpoints (the same greedy tokens and log-probabilities as
PEFT), replacing and unloading, every refusal of the runtime door with the server serving on, and
the log-probabilities an RL trainer reads."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import openai
import pytest
import torch
from moe_fixtures import RecordingSink, make_adapter, served_url
from peft import LoraConfig, PeftModel, get_peft_model

from tracegym.cli import build_parser, main
from tracegym.generation import render_chat
from tracegym.models import tiny_model
from tracegym.moe_router.chat_api import ChatRequest, call_openings, to_messages
from tracegym.moe_router.config import ServeConfig
from tracegym.moe_router.engine import Engine, GenerationRequest
from tracegym.moe_router.lora_slots import LoraSlots
from tracegym.moe_router.serve_cli import serve_config
from tracegym.moe_router.server import RunningServer, create_app

HELLO = [{"role": "user", "content": "Say hello."}]
pytest_plugins = ("moe_fixtures",)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """Adapter folders under `root` (the server's --lora-root) and outside it."""
    base = tmp_path_factory.mktemp("lora")
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    found = {"root": root, "outside": outside, "marker": base / "unpickled"}
    found["good"] = make_adapter(root / "good", "tool_calling_precision", seed=0)
    found["other"] = make_adapter(root / "other", "tool_calling_precision", seed=1)
    found["wide"] = make_adapter(root / "wide", "tool_calling_precision", seed=2, rank=8)
    found["away"] = make_adapter(outside / "away", "tool_calling_precision", seed=3)
    pickled = root / "pickled"
    pickled.mkdir()
    shutil.copyfile(found["good"] / "adapter_config.json", pickled / "adapter_config.json")
    # unpickling this would create the marker folder
    (pickled / "adapter_model.bin").write_bytes(pickle.dumps(_Trap(str(found["marker"]))))
    wrong_base = root / "wrong_base"
    shutil.copytree(found["good"], wrong_base)
    artifact = json.loads((wrong_base / "artifact.json").read_text())
    (wrong_base / "artifact.json").write_text(json.dumps({**artifact, "base_model": "smollm2-135m"}))
    hub_base = root / "hub_base"
    shutil.copytree(found["good"], hub_base)
    (hub_base / "artifact.json").unlink()
    config = json.loads((hub_base / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "HuggingFaceTB/SmolLM2-360M-Instruct"
    (hub_base / "adapter_config.json").write_text(json.dumps(config))
    found["narrow"] = _narrow_adapter(root / "narrow")
    (root / "link_out").symlink_to(found["away"], target_is_directory=True)
    file_link = root / "file_link"
    file_link.mkdir()
    shutil.copyfile(found["good"] / "adapter_config.json", file_link / "adapter_config.json")
    (file_link / "adapter_model.safetensors").symlink_to(found["away"] / "adapter_model.safetensors")
    fifo = root / "fifo"
    fifo.mkdir()
    shutil.copyfile(found["good"] / "adapter_config.json", fifo / "adapter_config.json")
    os.mkfifo(fifo / "adapter_model.safetensors")  # reading it would wait for a writer forever
    return found


class _Trap:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def _narrow_adapter(folder: Path) -> Path:
    """A LoRA of a tiny model with hidden size 32 (the served one has 64), claiming base "tiny"."""
    model = tiny_model(hidden_size=32)[0]
    torch.manual_seed(4)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def server(folders):
    config = ServeConfig(
        model_name="base",
        max_tokens=8,
        max_context=1024,
        lora=[f"start={folders['good']}"],
        lora_root=[str(folders["root"])],
        max_loras=4,
        max_lora_rank=4,
    )
    app, _ = create_app("tiny", config)
    with RunningServer(app) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)


def _load(url: str, name: str, path: Path | str, **extra) -> httpx.Response:
    return httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path), **extra})


def _unload(url: str, name: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": name})


def _greedy(client: openai.OpenAI, model: str, **extra):
    """A greedy reply of `model` with its tokens as ids and their log-probabilities."""
    return client.chat.completions.create(
        model=model,
        messages=HELLO,
        temperature=0,
        max_tokens=8,
        logprobs=True,
        top_logprobs=3,
        extra_body={"return_tokens_as_token_ids": True},
        **extra,
    ).choices[0]


def _ids(choice) -> list[int]:
    return [int(entry.token.removeprefix("token_id:")) for entry in choice.logprobs.content]


def test_models_list_the_base_and_the_adapters_loaded_at_start(server):
    data = httpx.get(f"{server.url}/v1/models").json()["data"]
    assert [card["id"] for card in data if card["id"] in ("base", "start")] == ["base", "start"]
    start = next(card for card in data if card["id"] == "start")
    assert start["parent"] == "base" and start["object"] == "model"
    assert data[0]["max_model_len"] == 1024


def test_a_runtime_loaded_adapter_replies_as_the_one_loaded_at_start_and_as_peft(server, client, folders):
    response = _load(server.url, "runtime", folders["good"])
    assert response.status_code == 200 and response.text == "Success: LoRA adapter 'runtime' added successfully."
    assert "runtime" in [model.id for model in client.models.list()]
    at_start, at_runtime, base = _greedy(client, "start"), _greedy(client, "runtime"), _greedy(client, "base")
    assert _ids(at_runtime) == _ids(at_start) and at_runtime.message.content == at_start.message.content
    assert [e.logprob for e in at_runtime.logprobs.content] == [e.logprob for e in at_start.logprobs.content]
    assert _ids(base) != _ids(at_start)  # the adapter changes the model
    # the same greedy tokens and log-probabilities as the adapter applied by PEFT
    model, tokenizer = tiny_model()
    peft_model = PeftModel.from_pretrained(model, str(folders["good"])).eval()
    prompt = render_chat(tokenizer, to_messages(ChatRequest.model_validate({"model": "m", "messages": HELLO})))
    tokens = _ids(at_runtime)
    with torch.no_grad():
        logits = peft_model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    expected = logits.log_softmax(-1)
    assert logits.argmax(-1).tolist() == tokens
    reported = torch.tensor([entry.logprob for entry in at_runtime.logprobs.content])
    assert torch.allclose(reported, expected[torch.arange(len(tokens)), tokens], atol=1e-4)
    top = at_runtime.logprobs.content[0].top_logprobs
    assert [int(t.token.removeprefix("token_id:")) for t in top] == expected[0].topk(3).indices.tolist()
    assert _unload(server.url, "runtime").status_code == 200


def test_reloading_a_name_replaces_its_adapter_and_unloading_removes_it(server, client, folders):
    assert _load(server.url, "policy", folders["good"]).status_code == 200
    assert _ids(_greedy(client, "policy")) == _ids(_greedy(client, "start"))
    assert _load(server.url, "other", folders["other"]).status_code == 200
    assert _load(server.url, "policy", folders["other"], load_inplace=True).status_code == 200  # the trainer's step
    assert _ids(_greedy(client, "policy")) == _ids(_greedy(client, "other")) != _ids(_greedy(client, "start"))
    for name in ("policy", "other"):
        response = _unload(server.url, name)
        assert response.status_code == 200 and response.text == f"Success: LoRA adapter '{name}' removed successfully."
    with pytest.raises(openai.NotFoundError, match="model 'policy' not found"):
        _greedy(client, "policy")
    assert [model.id for model in client.models.list()] == ["base", "start"]


@pytest.mark.parametrize(
    ("name", "path", "status", "message"),
    [
        ("a", "{outside}/away", 403, "leads outside the folders"),
        ("a", "{root}/../outside/away", 403, "has a '..' part"),
        ("a", "{root}/link_out", 403, "leads outside the folders"),
        ("a", "{root}/file_link", 403, "leads outside the folders"),
        ("a", "{root}/pickled", 400, "only pickled weights (adapter_model.bin)"),
        ("a", "{root}/fifo", 400, "adapter_model.safetensors: not a regular file"),
        ("a", "{root}/wrong_base", 400, "trained on base model 'smollm2-135m', but this server serves 'tiny'"),
        ("a", "{root}/hub_base", 400, "trained on base model 'HuggingFaceTB/SmolLM2-360M-Instruct'"),
        ("a", "{root}/wide", 400, "has LoRA rank 8, above this server's maximum 4"),
        ("a", "{root}/narrow", 400, "maps 32 -> 32 features, this model's layer maps 64 -> 64"),
        ("a", "{root}/missing", 400, "no such adapter folder"),
        ("a", "{root}", 400, "not a PEFT LoRA folder"),
        ("base", "{root}/good", 400, "is the base model's name"),
        ("bad name", "{root}/good", 400, "lora_name 'bad name'"),
        ("newline\n", "{root}/good", 400, "lora_name 'newline\\n'"),
        ("a", "{root}/go\x00od", 400, "no NUL characters"),
    ],
    ids=[
        "outside",
        "dotdot",
        "symlink folder",
        "symlink file",
        "pickled",
        "pipe",
        "artifact base",
        "config base",
        "rank",
        "shapes",
        "missing",
        "not adapter",
        "base name",
        "bad name",
        "trailing newline",
        "nul in path",
    ],
)
def test_refused_loads_say_why_and_the_server_keeps_serving(server, client, folders, name, path, status, message):
    before = _ids(_greedy(client, "start"))
    response = _load(server.url, name, path.format(root=folders["root"], outside=folders["outside"]))
    assert response.status_code == status, response.text
    assert message in response.json()["error"]["message"]
    assert not folders["marker"].exists()  # the pickle was never loaded
    assert [model.id for model in client.models.list()] == ["base", "start"]
    assert _ids(_greedy(client, "start")) == before


@pytest.mark.parametrize("folder", ["file_link", "link_out"])
def test_a_symlink_swapped_in_after_the_folder_check_reads_nothing_from_outside(server, folders, monkeypatch, folder):
    """The files are checked through the handles they are read from: a symlink that appears after the
    folder's check (simulated by skipping that check) is still refused."""
    from tracegym.moe_router.lora_registry import LoraRegistry

    monkeypatch.setattr(LoraRegistry, "_folder", lambda self, path, from_client: Path(path))
    response = _load(server.url, "swapped", folders["root"] / folder)
    assert response.status_code == 403 and "leads outside the folders" in response.json()["error"]["message"]
    assert "swapped" not in [model["id"] for model in httpx.get(f"{server.url}/v1/models").json()["data"]]


def test_bad_unload_and_load_requests(server, client):
    response = _unload(server.url, "nobody")
    assert response.status_code == 404 and "cannot be found" in response.json()["error"]["message"]
    response = httpx.post(f"{server.url}/v1/load_lora_adapter", json={"lora_name": "x"})
    assert response.status_code == 400 and "lora_path" in response.json()["error"]["message"]
    assert client.chat.completions.create(model="start", messages=HELLO, max_tokens=2).choices


def test_runtime_loading_is_off_without_a_lora_root(folders):
    app, _ = create_app("tiny", ServeConfig(model_name="base", max_tokens=4, lora=[f"start={folders['good']}"]))
    with RunningServer(app) as running:
        for response in (_load(running.url, "x", folders["good"]), _unload(running.url, "start")):
            assert response.status_code == 403 and "--lora-root" in response.json()["error"]["message"]
        client = openai.OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0, timeout=60)
        assert [model.id for model in client.models.list()] == ["base", "start"]
        assert client.chat.completions.create(model="start", messages=HELLO, max_tokens=2).choices


def test_every_slot_taken_refuses_a_new_name_but_replaces_a_loaded_one(folders):
    config = ServeConfig(
        model_name="base", max_tokens=4, lora=[f"one={folders['good']}"], lora_root=[str(folders["root"])], max_loras=1
    )
    app, _ = create_app("tiny", config)
    with RunningServer(app) as running:
        response = _load(running.url, "two", folders["other"])
        assert (
            response.status_code == 400 and "all 1 adapter slots are taken (one)" in response.json()["error"]["message"]
        )
        assert _load(running.url, "one", folders["other"]).status_code == 200
        assert _unload(running.url, "one").status_code == 200
        assert _load(running.url, "two", folders["other"]).status_code == 200


def test_reloading_while_requests_run_never_mixes_two_adapters_in_one_reply(folders):
    """One row per batch (so every reply is computed alone and exactly); a reply of "policy" is the
    reply of one of the two adapters it alternates between, never a blend."""
    config = ServeConfig(
        model_name="base",
        max_tokens=8,
        max_batch_size=1,
        lora=[f"good={folders['good']}", f"other={folders['other']}"],
        lora_root=[str(folders["root"])],
    )
    app, _ = create_app("tiny", config)
    with RunningServer(app) as running:
        client = openai.OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0, timeout=60)
        expected = {tuple(_ids(_greedy(client, name))) for name in ("good", "other")}
        assert len(expected) == 2
        assert _load(running.url, "policy", folders["good"]).status_code == 200
        replies: list[tuple[int, ...]] = []
        stop = threading.Event()

        def ask() -> None:
            while not stop.is_set():
                replies.append(tuple(_ids(_greedy(client, "policy"))))

        askers = [threading.Thread(target=ask) for _ in range(3)]
        for thread in askers:
            thread.start()
        try:
            for step in range(6):
                assert _load(running.url, "policy", folders[("other", "good")[step % 2]]).status_code == 200
        finally:
            stop.set()
            for thread in askers:
                thread.join(60)
        assert len(replies) >= 3 and set(replies) <= expected
        assert tuple(_ids(_greedy(client, "policy"))) == tuple(_ids(_greedy(client, "good")))


def test_logprobs_have_vllms_shape_and_stream_the_same(client):
    request = {"model": "start", "messages": HELLO, "max_tokens": 8, "logprobs": True, "top_logprobs": 2}
    plain = client.chat.completions.create(temperature=0, **request).choices[0]
    content = plain.logprobs.content
    assert content and all(len(entry.top_logprobs) == 2 for entry in content)
    for entry in content:
        assert entry.bytes == list(entry.token.encode()) and entry.logprob <= 0
        assert entry.top_logprobs[0].token == entry.token and entry.top_logprobs[0].logprob == entry.logprob
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
    text = "".join(entry.token for entry in content)
    if plain.finish_reason == "stop":  # the end-of-turn token is reported too
        assert text == plain.message.content + "<|im_end|>"
    else:
        assert text == plain.message.content
    stream = client.chat.completions.create(temperature=0, stream=True, **request)
    streamed = [
        entry
        for chunk in stream
        if chunk.choices and chunk.choices[0].logprobs
        for entry in chunk.choices[0].logprobs.content
    ]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]
    # sampled: the sampled token comes first in top_logprobs (vLLM's order), even when it is not the likeliest
    sampled = client.chat.completions.create(temperature=2, **request).choices[0].logprobs.content
    assert all(entry.top_logprobs[0].token == entry.token for entry in sampled)
    without = client.chat.completions.create(temperature=0, model="start", messages=HELLO, max_tokens=3)
    assert without.choices[0].logprobs is None
    just = client.chat.completions.create(temperature=0, model="start", messages=HELLO, max_tokens=3, logprobs=True)
    assert all(entry.top_logprobs == [] for entry in just.choices[0].logprobs.content)


def test_bad_logprobs_and_response_formats_get_400(server, client):
    url = f"{server.url}/v1/chat/completions"
    cases = [
        ({"top_logprobs": 2}, "`logprobs` must be set to true"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format type 'json_object' is not supported"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "'json_schema' is not supported"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
    ]
    for extra, message in cases:
        response = httpx.post(url, json={"model": "start", "messages": HELLO, **extra}, timeout=30)
        assert response.status_code == 400 and message in response.json()["error"]["message"], response.text
    reply = client.chat.completions.create(
        model="start", messages=HELLO, max_tokens=2, response_format={"type": "text"}
    )
    assert reply.choices[0].message.role == "assistant"


TOOLS = [
    {"type": "function", "function": {"name": "find_room", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "book_room", "parameters": {"type": "object", "properties": {}}}},
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("choice", "allowed"),
    [
        ("required", ("find_room", "book_room")),
        ({"type": "function", "function": {"name": "book_room"}}, ("book_room",)),
    ],
    ids=["required", "named"],
)
def test_required_and_named_tool_choices_open_a_call_or_fail_clearly(server, choice, allowed, stream):
    body = {"model": "start", "messages": HELLO, "tools": TOOLS, "tool_choice": choice, "max_tokens": 40}
    response = httpx.post(f"{server.url}/v1/chat/completions", json={**body, "stream": stream}, timeout=60)
    if stream:
        events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
        error = events[-1].get("error")
        calls = [
            call
            for event in events
            for call in (event.get("choices") or [{}])[0].get("delta", {}).get("tool_calls", [])
        ]
    else:
        error = response.json().get("error")
        calls = response.json()["choices"][0]["message"]["tool_calls"] if response.status_code == 200 else []
    if error is None:  # the random model wrote a well-formed call: of an allowed function
        assert calls and all(call["function"]["name"] in allowed for call in calls)
    else:
        assert error["code"] == "tool_call_failed" and response.status_code == (200 if stream else 500)
        openings = [f'The reply: <tool_call>{{"name": "{name}", "arguments":' for name in allowed]
        assert any(opening in error["message"] for opening in openings), error["message"]


def test_tool_choice_refusals(server):
    url = f"{server.url}/v1/chat/completions"
    for extra, message in [
        ({"tool_choice": "required"}, "tool_choice 'required' needs tools"),
        ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "needs tools"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "f"}}},
            "names function 'f', not among the tools: find_room, book_room",
        ),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ]:
        response = httpx.post(url, json={"model": "base", "messages": HELLO, **extra}, timeout=30)
        assert response.status_code == 400 and message in response.json()["error"]["message"], response.text


def test_a_chunked_body_over_the_limit_gets_413_and_one_under_it_is_served(folders):
    app, _ = create_app("tiny", ServeConfig(model_name="base", max_tokens=2, max_body_bytes=20_000))
    body = json.dumps({"model": "base", "messages": HELLO}).encode()

    def chunked(data: bytes, size: int = 1000):
        for start in range(0, len(data), size):
            yield data[start : start + size]

    with RunningServer(app) as running:
        url = f"{running.url}/v1/chat/completions"
        big = body[:-1] + b"," + b'"pad": "' + b"x" * 30_000 + b'"}'
        response = httpx.post(url, content=chunked(big), headers={"content-type": "application/json"}, timeout=30)
        assert response.status_code == 413 and "request body over 20000 bytes" in response.json()["error"]["message"]
        response = httpx.post(url, content=chunked(body, 7), headers={"content-type": "application/json"}, timeout=30)
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["role"] == "assistant"
        response = httpx.post(url, content=big, headers={"content-type": "application/json"}, timeout=30)
        assert response.status_code == 413


def test_lora_flags_repeat_and_refuse_what_cannot_be_served(folders, routed_folder, capsys, monkeypatch):
    args = build_parser("serve").parse_args(
        ["serve", "tiny", "--lora", "a=/x", "--lora", "b=/y", "--lora-root", "/r", "--lora-root", "/s"]
    )
    config = serve_config(args)
    assert config.lora == ["a=/x", "b=/y"] and config.lora_root == ["/r", "/s"]
    assert serve_config(build_parser("serve").parse_args(["serve", "tiny"])).lora == []
    with pytest.raises(ValueError, match="NAME=PATH"):
        ServeConfig(lora=["no-path"])
    for argv, problem in [
        (["serve", "tiny", "--lora", f"w={folders['wide']}", "--max-lora-rank", "4"], "--lora w="),
        (["serve", "tiny", "--lora-root", str(folders["root"] / "missing")], "no such folder"),
        (["serve", str(routed_folder), "--lora", f"a={folders['good']}"], "is a routed folder"),
        (["serve", str(folders["root"])], "neither a routed folder"),
    ]:
        monkeypatch.setattr("tracegym.moe_router.server.RunningServer", _NeverStarts)
        assert main([*argv, "--port", "0"]) == 1
        assert problem in capsys.readouterr().err


class _NeverStarts:
    def __init__(self, *args, **kwargs) -> None:
        raise AssertionError("the command was to refuse before serving")


def test_the_command_serves_a_base_model_with_adapters(folders):
    command = [
        sys.executable,
        "-m",
        "tracegym.cli",
        "serve",
        "tiny",
        "--lora",
        f"start={folders['good']}",
        "--lora-root",
        str(folders["root"]),
        "--port",
        "0",
        "--model-name",
        "base",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
    reader.start()
    try:
        url = served_url(lines, process, 120)
        assert "adapter 'start'" in "".join(lines) and "adapters load at run time from" in "".join(lines)
        assert _load(url, "runtime", folders["good"]).status_code == 200
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
        assert [model.id for model in client.models.list()] == ["base", "start", "runtime"]
        assert _ids(_greedy(client, "runtime")) == _ids(_greedy(client, "start"))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        reader.join(10)
    assert process.returncode == 0, "".join(lines)[-2000:]


def test_openings_hold_each_row_to_one_of_its_sequences_and_leave_others_free():
    model, tokenizer = tiny_model()
    slots = LoraSlots(model, 1, 4)
    engine = Engine(model, tokenizer, slots.router, lambda task: 0, max_batch_size=8, batch_wait_s=0.05)
    names = ("find_room", "book_room", "cancel_booking")
    openings = call_openings(names, tokenizer)
    assert {tokenizer.decode(opening[-1:]) for opening in openings} == {'":'}, "no lone trailing space token"
    prompt = render_chat(tokenizer, [{"role": "user", "content": "Book a room."}])
    rows = [(0.0, openings), (1.0, openings), (1.0, openings), (0.0, openings[2:]), (0.0, ())]
    sinks = [RecordingSink() for _ in rows]
    engine.start()
    try:
        for (temperature, allowed), sink in zip(rows, sinks):
            length = max(map(len, openings)) + 3
            engine.submit(GenerationRequest(prompt, length, temperature, 1.0, sink, slot=0, openings=allowed))
        assert all(sink.done.wait(60) for sink in sinks)
    finally:
        engine.stop()
    for (_, allowed), sink in zip(rows, sinks):
        assert sink.finish == "length"
        if allowed:
            assert any(tuple(sink.tokens[: len(option)]) == option for option in allowed), sink.tokens
            text = tokenizer.decode(sink.tokens)
            assert any(text.startswith(f'<tool_call>{{"name": "{name}", "arguments":') for name in names)
    assert tokenizer.decode(sinks[3].tokens).startswith('<tool_call>{"name": "cancel_booking"')
    assert not tokenizer.decode(sinks[4].tokens).startswith("<tool_call>")  # the free row: the base's own reply
