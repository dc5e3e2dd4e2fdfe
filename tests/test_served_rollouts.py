"""Rollouts sampled by a real `tracegym serve` (in a thread, on a free port) against the in-process
engine: greedy episodes equal, the server's prompt is the trainer's context, and GRPO with its
rollouts from the server hot-loads each step's adapter, trains, and resumes after the server died."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import torch
from adapters_lookup_env import LookupEnv, ProseEnv

from tracegym.adapters.config import CreditConfig, TurnGRPOConfig
from tracegym.adapters.grpo import TurnGRPOTrainer, read_log
from tracegym.adapters.lora import attach_lora, trainable_state
from tracegym.adapters.train import load_base
from tracegym.config import RolloutConfig, ServedRolloutConfig
from tracegym.environment import StepResult
from tracegym.errors import UserError
from tracegym.generation import HFBackend, SamplingConfig, render_chat
from tracegym.models import tiny_model
from tracegym.moe_router.config import ServeConfig
from tracegym.moe_router.server import RunningServer, create_app
from tracegym.rollout import run_episodes
from tracegym.served_rollout import PolicyServer, ServerUnavailable, run_served_episodes


def ending_model(folder: Path) -> Path:
    """The tiny model, saved as a model folder, changed so that about one token in ten is
    <|im_end|> (turns end by themselves): residual dimension 0 is a constant 1 (the embeddings' and
    nothing else writes it), and only <|im_end|>'s output row reads it."""
    model, tokenizer = tiny_model()
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=False)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0].zero_()
            layer.mlp.down_proj.weight[0].zero_()
        head.weight[:, 0] = 0.0
        head.weight[tokenizer.eos_token_id, 0] = 9.0 / 8
    model.lm_head = head
    model.config.tie_word_embeddings = False
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


class EchoEnv(LookupEnv):
    """LookupEnv whose first `echoes` turns, whatever they say, get an observation; the next ends it."""

    name = "echo_test"
    echoes = 2

    def __init__(self, **knobs) -> None:
        super().__init__(**knobs)
        self.verify = False  # its oracle (LookupEnv's) does not fit the echo turns

    def step(self, action: str) -> StepResult:
        if self.turns < self.echoes:
            self.turns += 1
            return StepResult(f"noted turn {self.turns}: {len(action)} characters", 0.0, False, False)
        return super().step(action)


def _serve(model: str, root: Path, max_context: int | None = 2048) -> RunningServer:
    config = ServeConfig(
        model_name="base", max_tokens=64, max_context=max_context, lora_root=[str(root)], max_loras=4, max_lora_rank=16
    )
    return RunningServer(create_app(model, config)[0])


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("served_adapters")


@pytest.fixture(scope="module")
def tiny_server(root):
    with _serve("tiny", root) as running:
        yield running


@pytest.fixture(scope="module")
def ending(tmp_path_factory) -> Path:
    return ending_model(tmp_path_factory.mktemp("ending") / "model")


@pytest.fixture(scope="module")
def ending_server(ending, root):
    with _serve(str(ending), root) as running:
        yield running


def _same_episodes(served, local) -> None:
    assert len(served) == len(local)
    for a, b in zip(served, local):
        assert (a.seed, a.hinted, a.reward) == (b.seed, b.hinted, b.reward)
        assert a.prompt_ids == b.prompt_ids and a.train_prompt_ids == b.train_prompt_ids
        assert a.completion_ids == b.completion_ids
        assert (a.loss_mask, a.turn_ids, a.boundaries) == (b.loss_mask, b.turn_ids, b.boundaries)
        assert [m.content for m in a.messages] == [m.content for m in b.messages]
        assert a.info["finish"] == b.info["finish"]
        assert a.info["context_mismatch_turns"] == 0


def test_greedy_served_episodes_equal_the_in_process_ones(tiny_server):
    model, tokenizer = tiny_model()
    params = SamplingConfig(max_new_tokens=12, temperature=0.0)
    server = PolicyServer(tiny_server.url, "base", timeout=60)
    served = run_served_episodes(server, tokenizer, ProseEnv, [0, 1, 2], 2, params, 4, hint_fraction=0.5)
    local = run_episodes(HFBackend(model, tokenizer), ProseEnv, [0, 1, 2], 2, params, hint_fraction=0.5)
    _same_episodes(served, local)
    assert [e.hinted for e in served] == [True, False] * 3
    assert all(e.info["finish"] == "length" and len(e.completion_ids) >= 12 for e in served)
    for a, b in zip(served, local):  # the server's raw log-probs are the model's (temperature 0: unscaled)
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_sampled_served_episodes_repeat_with_the_same_sampling_seed(tiny_server):
    _, tokenizer = tiny_model()
    server = PolicyServer(tiny_server.url, "base", timeout=60)

    def sampled(seed: int) -> list[list[int]]:
        params = SamplingConfig(max_new_tokens=12, temperature=1.0, seed=seed)
        return [e.completion_ids for e in run_served_episodes(server, tokenizer, ProseEnv, [0, 1], 2, params, 4)]

    first = sampled(5)
    assert sampled(5) == first and sampled(6) != first
    assert first[0] != first[1], "each rollout of a seed draws its own sampling seed"


def test_multi_turn_episodes_through_the_server_keep_the_token_accounting(ending_server, ending):
    """Greedy turns of the ending model are <|im_end|> alone: three turns, two observations, each
    turn's prompt as the server counted it equal to the trainer's context."""
    model, tokenizer = load_base(str(ending))
    params = SamplingConfig(max_new_tokens=8, temperature=0.0)
    server = PolicyServer(ending_server.url + "/v1/", "base", timeout=60)
    served = run_served_episodes(server, tokenizer, EchoEnv, [3, 4], 2, params, 3)
    local = run_episodes(HFBackend(model, tokenizer), EchoEnv, [3, 4], 2, params)
    _same_episodes(served, local)
    assert all(e.num_actions == 2 and e.info["finish"] == "answer" for e in served)
    final = served[0]
    assert render_chat(tokenizer, final.messages, add_generation_prompt=False) == (
        final.prompt_ids + final.completion_ids
    )


def test_sampled_turns_count_where_the_server_saw_other_tokens(ending_server, ending):
    """At temperature 1 the ending model writes random tokens: a turn whose tokens are not the
    tokenizer's own encoding of their text reaches the server re-encoded, and only such turns count."""
    _, tokenizer = load_base(str(ending))
    params = SamplingConfig(max_new_tokens=16, temperature=1.0)
    long_echo = type("LongEcho", (EchoEnv,), {"echoes": 4})
    server = PolicyServer(ending_server.url, "base", 60)
    episodes = run_served_episodes(server, tokenizer, long_echo, range(16), 2, params, 8)
    counted = 0
    for episode in episodes:
        turns = [
            [t for t, k in zip(episode.completion_ids, episode.turn_ids) if k == turn]
            for turn in range(len(episode.boundaries))
        ]
        texts = [m.content for m in episode.messages if m.role == "assistant"]
        eos = tokenizer.eos_token_id
        canonical = [
            tokenizer(text, add_special_tokens=False)["input_ids"] == [t for t in ids if t != eos]
            for text, ids in zip(texts, turns)
        ]
        # turn k's prompt holds assistant turns 0..k-1; a turn is counted once its prompt holds a non-canonical one
        asked = len(texts)
        expected = sum(not all(canonical[:k]) for k in range(asked))
        assert episode.info["context_mismatch_turns"] == expected
        counted += expected
    assert counted  # the random turns held non-canonical ones that later turns were asked after


def test_a_server_that_does_not_answer_is_a_user_error_naming_its_url(tmp_path):
    with _serve("tiny", tmp_path) as running:
        url = running.url
    _, tokenizer = tiny_model()
    with pytest.raises(ServerUnavailable, match=url.replace(".", r"\.")):
        run_served_episodes(
            PolicyServer(url, "base", 60), tokenizer, ProseEnv, [0], 1, SamplingConfig(max_new_tokens=4), 1
        )
    with pytest.raises(UserError, match="no such folder"):
        _trainer(tmp_path / "run", "tiny", url, tmp_path / "absent")


@pytest.fixture()
def canned():
    """A fake server answering every request with the next of its `replies` (status, headers,
    body: JSON or text); yields (its URL, the replies to fill, the times requests came)."""
    replies: list[tuple[int, dict[str, str], object]] = []
    times: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _reply(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            times.append(time.monotonic())
            status, headers, body = replies.pop(0)
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _reply

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", replies, times
    httpd.shutdown()
    httpd.server_close()


def _reply(**changes) -> dict:
    """A chat completion of two tokens as vLLM sends it, with `changes` (None: the key removed)."""
    reply = {
        "choices": [
            {
                "finish_reason": "length",
                "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": lp} for t, lp in ((5, -0.5), (7, -1))]},
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2},
    }
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = reply
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return reply


def test_a_server_that_is_not_openai_shaped_is_a_user_error_naming_its_url_and_what_is_missing(canned):
    url, replies, times = canned
    _, tokenizer = tiny_model()
    server = PolicyServer(url, "base", 10)
    params, chat = SamplingConfig(max_new_tokens=2, temperature=1.0), [{"role": "user", "content": "hi"}]

    def turn(*answers):
        replies.extend(answers)

        async def one():
            async with httpx.AsyncClient(timeout=10) as client:
                return await server.complete(client, "base", chat, params, None, tokenizer)

        return asyncio.run(one())

    served = turn((200, {}, _reply()))
    assert (served.prompt_tokens, served.completion.token_ids, served.completion.logprobs) == (9, [5, 7], [-0.5, -1.0])
    # a busy server whose Retry-After is an HTTP date: waited for 1 second, then asked again
    served = turn((503, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, {}), (200, {}, _reply()))
    assert served.completion.token_ids == [5, 7] and 0.9 < times[-1] - times[-2] < 5
    entries = "choices__0__logprobs__content"
    for reply, missing in [
        (_reply(usage=None), "a number at usage.completion_tokens"),
        (_reply(usage__prompt_tokens=None), "a number at usage.prompt_tokens"),
        (_reply(usage__prompt_tokens="many"), "a number at usage.prompt_tokens"),
        (_reply(choices__0__finish_reason=None), "choices[0].finish_reason"),
        (_reply(choices=[]), "choices[0]"),
        ({"id": "x"}, "choices[0]"),
        ([1, 2], "choices[0]"),
        ("not json", "a JSON body"),
        (_reply(**{entries: [{"logprob": -1.0}]}), "choices[0].logprobs.content[0].token"),
        (_reply(**{entries: [{"token": "token_id:5"}]}), "a number at choices[0].logprobs.content[0].logprob"),
    ]:
        expected = re.escape(f"rollout server {url} sent a chat completion without {missing}")
        with pytest.raises(UserError, match=expected):
            turn((200, {}, reply))
    with pytest.raises(UserError, match="logprobs for a different number of tokens"):
        turn((200, {}, _reply(usage__completion_tokens=1)))
    with pytest.raises(UserError, match="return_tokens_as_token_ids"):
        turn((200, {}, _reply(**{entries: [{"token": "hi", "logprob": -1.0}]})))
    for body in ({"object": "list"}, {"data": [{"name": "base"}]}, "<html>"):
        replies.append((200, {}, body))
        with pytest.raises(UserError, match=re.escape(f"rollout server {url} sent its list of models")):
            server.models()
    replies.append((200, {}, {"data": [{"id": "base"}, {"id": "a"}]}))
    assert server.models() == ["base", "a"]


class StoppingClient(PolicyServer):
    """A client of a real server that stops it just before sending its `at`-th completion request."""

    def __init__(self, running: RunningServer, at: int) -> None:
        super().__init__(running.url, "base", 60)
        self.running, self.at, self.sent = running, at, 0

    async def complete(self, *args, **kwargs):
        self.sent += 1
        if self.sent == self.at:
            await asyncio.to_thread(_stop, self.running)
        return await super().complete(*args, **kwargs)


def _stop(server: RunningServer) -> None:
    server.server.should_exit = True
    server.thread.join(30)


def _trainer(out: Path, model_name: Path | str, url: str, adapter_dir: Path, steps: int = 3) -> TurnGRPOTrainer:
    model, tokenizer = load_base(str(model_name))
    served = ServedRolloutConfig(url=url, model="base", adapter_dir=str(adapter_dir), in_flight=4)
    config = TurnGRPOConfig(
        steps=steps,
        groups_per_step=2,
        group_size=4,
        learning_rate=1e-2,
        lora_rank=4,
        save_every=1,
        max_redraws=0,
        credit=CreditConfig(credit="grpo"),
        served=served,
    )
    rollout = RolloutConfig(temperature=1.0, max_new_tokens=24)
    return TurnGRPOTrainer(attach_lora(model, rank=4), tokenizer, ProseEnv, config, rollout, out)


def _names(url: str) -> list[str]:
    return [card["id"] for card in httpx.get(f"{url}/v1/models").json()["data"]]


def test_grpo_from_served_rollouts_hot_loads_each_step_and_resumes_after_the_server_died(ending, root, tmp_path):
    out = tmp_path / "run"
    first = _serve(str(ending), root)
    with first:
        trainer = _trainer(out, ending, first.url, root)
        start = trainable_state(trainer.policy)
        seen = []
        for step in (1, 2):
            records = trainer.train(progress=False, until=step)
            names = _names(first.url)
            # the adapter of the weights after this step is served, and only this run's newest
            mine = [name for name in names if name.startswith(trainer.adapter_prefix)]
            assert mine == [f"{trainer.adapter_prefix}{step}"] and (root / mine[0]).is_dir()
            assert records[-1]["served_adapter"] == f"{trainer.adapter_prefix}{step - 1}"
            assert records[-1]["kept_groups"] > 0 and records[-1]["context_mismatch_turns"] == 0
            seen += mine
        assert not (root / f"{trainer.adapter_prefix}1").exists()  # unloaded ones are deleted
        trained = trainable_state(trainer.policy)
        assert any(not torch.equal(start[k], v) for k, v in trained.items())
        # the served adapter is the trainer's LoRA: the same greedy reply and log-probs from both
        chat = [{"role": "user", "content": "hi"}]
        served = httpx.post(
            f"{first.url}/v1/chat/completions",
            json={"model": seen[-1], "messages": chat, "max_tokens": 6, "temperature": 0, "logprobs": True},
        ).json()["choices"][0]["logprobs"]["content"]
        local = HFBackend(trainer.policy, trainer.tokenizer).chat([chat], SamplingConfig(6, temperature=0.0))[0]
        assert len(served) == len(local.token_ids)
        assert torch.allclose(torch.tensor([e["logprob"] for e in served]), torch.tensor(local.logprobs), atol=1e-4)
        # the server stops in the middle of step 3's rollouts (as its third request goes out): the step
        # fails with the URL named, and step 2's checkpoint is the last
        trainer.server = StoppingClient(first, at=3)
        with pytest.raises(ServerUnavailable, match=first.url.replace(".", r"\.")):
            trainer.train(progress=False)
        assert trainer.server.sent >= 3 and not first.thread.is_alive()
    assert [r["step"] for r in read_log(out)] == [1, 2]
    second = _serve(str(ending), root)
    with second:
        resumed = _trainer(out, ending, second.url, root)
        assert resumed.resume() and resumed.step == 2
        assert all(torch.equal(trained[k], v) for k, v in trainable_state(resumed.policy).items())
        records = resumed.train(progress=False)
        assert [r["step"] for r in records] == [3]
        assert records[0]["served_adapter"] == f"{resumed.adapter_prefix}2"
        # the last step's weights are not published, and the run's adapters are gone once it is over
        assert not [name for name in _names(second.url) if name.startswith(resumed.adapter_prefix)]
        assert not list(root.glob(f"{resumed.adapter_prefix}*"))
    assert [r["step"] for r in read_log(out)] == [1, 2, 3]
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert all(r["loss"] is not None for r in log)


class RefusingClient(PolicyServer):
    """A client of a real server that refuses, as vLLM does (HTTP 400), to load a name it serves already."""

    def __init__(self, url: str) -> None:
        super().__init__(url, "base", 60)
        self.calls: list[tuple[str, str]] = []

    def load_adapter(self, name: str, path: str) -> None:
        if name in self.models():
            raise UserError(f"the rollout server {self.url} refused to load {path} as '{name}': 400 already loaded")
        self.calls.append(("load", name))
        super().load_adapter(name, path)

    def unload_adapter(self, name: str) -> None:
        self.calls.append(("unload", name))
        super().unload_adapter(name)


def test_a_resumed_run_republishes_a_step_the_server_has_and_leaves_no_adapter(tiny_server, root, tmp_path):
    """Killed after step 1 was published, the run resumes at step 1 against the same server, which
    still serves that name: it is unloaded and loaded again; the last step publishes nothing, and
    once training is over no adapter of the run is served or left on disk."""
    out = tmp_path / "run"
    first = _trainer(out, "tiny", tiny_server.url, root, steps=2)
    first.train(progress=False, until=1)
    step1 = f"{first.adapter_prefix}1"
    assert step1 in _names(tiny_server.url)
    resumed = _trainer(out, "tiny", tiny_server.url, root, steps=2)
    resumed.server = RefusingClient(tiny_server.url)
    assert resumed.resume() and resumed.step == 1
    records = resumed.train(progress=False)
    assert [r["step"] for r in records] == [2] and records[0]["served_adapter"] == step1
    assert resumed.server.calls[:2] == [("unload", step1), ("load", step1)]
    assert ("load", f"{resumed.adapter_prefix}2") not in resumed.server.calls
    assert not [name for name in _names(tiny_server.url) if name.startswith(resumed.adapter_prefix)]
    assert not list(root.glob(f"{resumed.adapter_prefix}*")) and resumed.published is None


@pytest.mark.slow
@pytest.mark.parametrize("family", ["multi_step_task_completion", "precondition_verification"])
def test_greedy_served_episodes_equal_the_in_process_ones_on_the_embedded_model(family, tmp_path):
    """The embedded model, greedy, at the family's fitted turn budget: the same episodes (tokens,
    turns, rewards) through `tracegym serve` as in process, for a handful of seeds."""
    from tracegym.config import DEFAULT_MODEL
    from tracegym.synth_envs.registry import make_env

    model, tokenizer = load_base(DEFAULT_MODEL)
    env = functools.partial(make_env, family)
    params = SamplingConfig(max_new_tokens=None, temperature=0.0)
    seeds = [0, 1, 2, 3, 4]
    with _serve(DEFAULT_MODEL, tmp_path, max_context=None) as running:
        served = run_served_episodes(PolicyServer(running.url, "base", 600), tokenizer, env, seeds, 1, params, 5)
    local = run_episodes(HFBackend(model, tokenizer), env, seeds, 1, params)
    _same_episodes(served, local)


def test_train_cli_samples_from_the_server_and_resumes_after_it_was_down(
    tiny_server, root, tmp_path, capsys, monkeypatch
):
    from tracegym.adapters import grpo, train
    from tracegym.cli import main
    from tracegym.served_rollout import connect

    connections = []  # the server is checked once per run (process), before any work

    def counted(served):
        connections.append(served.url)
        return connect(served)

    monkeypatch.setattr(train, "connect", counted)
    monkeypatch.setattr(grpo, "connect", counted)

    out = tmp_path / "adapter"
    common = ["train", "precondition_verification", "--out", str(out), "--model", "tiny", "--eval-seeds", "0"]
    common += ["--grpo-groups-per-step", "1", "--grpo-group-size", "2", "--max-new-tokens", "6"]
    common += ["--grpo-save-every", "1", "--credit", "grpo", "--rollout-model", "base"]
    served = ["--rollout-url", tiny_server.url, "--rollout-adapter-dir", str(root)]
    assert main([*common, *served, "--grpo-steps", "1"]) == 0
    assert connections == [tiny_server.url]
    assert not [name for name in _names(tiny_server.url) if name.startswith("adapter-")], "its adapters are unloaded"
    with _serve("tiny", root) as gone:
        dead = gone.url
    assert (
        main([*common, "--rollout-url", dead, "--rollout-adapter-dir", str(root), "--grpo-steps", "2", "--resume"]) == 1
    )
    error = capsys.readouterr().err
    assert f"the rollout server {dead} is not answering" in error and "--resume" in error
    assert main([*common, *served, "--grpo-steps", "2", "--resume"]) == 0
    records = read_log(out)
    assert [r["step"] for r in records] == [1, 2]
    assert [r["served_adapter"].rsplit("-", 1)[1] for r in records] == ["step0", "step1"]
    assert (
        main([*common, *served[:2], "--rollout-adapter-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "b")])
        == 1
    )
    assert "--rollout-adapter-dir" in capsys.readouterr().err
