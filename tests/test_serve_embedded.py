"""End to end on the embedded model (slow): warm-start an adapter on an environment, route it,
serve the routed folder, and drive it with the official `openai` client: a tool-call round trip,
streaming, and an agent loop that plays the environment through the server only and reaches the
same greedy rewards as the in-process rollout on the same seeds."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import openai
import pytest

from tracegym.generation import HFBackend, SamplingConfig
from tracegym.models import DEFAULT_MODEL, load_model
from tracegym.moe_router.config import RouterTrainingConfig, ServeConfig
from tracegym.moe_router.folder import load_policy
from tracegym.moe_router.route import build_router
from tracegym.moe_router.server import RunningServer, create_app
from tracegym.rollout import run_episodes, turn_token_budget
from tracegym.schema import AdapterArtifact, EnvSpec
from tracegym.synth_envs.base import Environment
from tracegym.synth_envs.registry import make_env
from tracegym.toolcalls import render_tool_call

pytestmark = pytest.mark.slow
FAMILY = "precondition_verification"
SEEDS = [1_000_000, 1_000_001, 1_000_002]
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>\n", "\n</tool_response>"


@pytest.fixture(scope="module")
def routed(tmp_path_factory) -> Path:
    """A warm-started adapter for FAMILY on the embedded model, routed (router trained on it)."""
    from tracegym.adapters.sft import WarmStartConfig, warm_start

    root = tmp_path_factory.mktemp("embedded")
    model, tokenizer = load_model()
    adapter = root / FAMILY
    config = WarmStartConfig(dialogues=48, steps=12, batch_size=4)
    warm_start(model, tokenizer, [functools.partial(make_env, FAMILY)], range(48), config, adapter)
    artifact = AdapterArtifact(
        capability=FAMILY,
        path=str(adapter),
        base_model=DEFAULT_MODEL,
        env_spec=EnvSpec(capability=FAMILY, family=FAMILY),
        credit="trace",
    )
    (adapter / "artifact.json").write_text(artifact.model_dump_json())
    out = root / "router"
    build_router(
        [adapter], out, RouterTrainingConfig(train_dialogues=6, heldout_dialogues=2, tokens_per_slot=1024, steps=200)
    )
    return out


@pytest.fixture(scope="module")
def client(routed):
    app, _ = create_app(str(routed), ServeConfig(model_name="emb"))
    with RunningServer(app) as server:
        yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=600)


def _request(env: Environment, messages: list[dict]) -> dict:
    return {
        "messages": messages,
        "tools": [{"type": "function", "function": tool} for tool in env.tools],
        "temperature": 0,
    }


def play_over_http(
    client: openai.OpenAI, model: str, env: Environment, seed: int, max_tokens: int
) -> tuple[float, list[str], int]:
    """One greedy episode of `env` played through the server only: the agent sends the
    environment's instructions, tools and task, executes the returned tool calls in the
    environment and sends the results back. Returns the reward, the assistant texts and the
    number of tool-call replies."""
    messages = [{"role": "system", "content": env.instructions}, {"role": "user", "content": env.reset(seed)}]
    texts, tool_replies = [], 0
    while True:
        choice = client.chat.completions.create(model=model, max_tokens=max_tokens, **_request(env, messages)).choices[
            0
        ]
        message = choice.message
        calls = message.tool_calls or []
        tool_replies += bool(calls)
        text = "\n".join(
            [
                message.content or "",
                *(render_tool_call(c.function.name, json.loads(c.function.arguments)) for c in calls),
            ]
        ).strip()
        texts.append(text if calls else message.content)
        if choice.finish_reason == "length":  # as the rollout engine: a turn cut at its budget scores 0
            return 0.0, texts, tool_replies
        result = env.step(texts[-1])
        if result.ended and not result.observation:
            return result.reward, texts, tool_replies
        messages.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
        if calls:  # the environment answers all calls in one response; send it as one tool message
            body = result.observation.removeprefix(RESPONSE_OPEN).removesuffix(RESPONSE_CLOSE)
            messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": body})
        else:
            messages.append({"role": "user", "content": result.observation})
        if result.ended:
            return result.reward, texts, tool_replies


def test_tool_call_round_trip_and_streaming_with_the_openai_client(client):
    env = make_env(FAMILY)
    messages = [{"role": "system", "content": env.instructions}, {"role": "user", "content": env.reset(SEEDS[0])}]
    request = {"model": f"emb:{FAMILY}", "max_tokens": 128, **_request(env, messages)}
    first = client.chat.completions.create(**request).choices[0]
    assert first.finish_reason == "tool_calls" and first.message.tool_calls
    call = first.message.tool_calls[0]
    assert call.function.name in {tool["name"] for tool in env.tools}
    chunks = list(client.chat.completions.create(stream=True, **request))
    streamed = [d.tool_calls[0] for c in chunks if c.choices and (d := c.choices[0].delta).tool_calls]
    assert [(c.function.name, c.function.arguments) for c in streamed] == [
        (c.function.name, c.function.arguments) for c in first.message.tool_calls
    ]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (first.message.content or "")
    result = env.step(render_tool_call(call.function.name, json.loads(call.function.arguments)))
    messages += [
        first.message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}),
        {
            "role": "tool",
            "tool_call_id": call.id,
            "content": result.observation.removeprefix(RESPONSE_OPEN).removesuffix(RESPONSE_CLOSE),
        },
    ]
    second = client.chat.completions.create(**{**request, **_request(env, messages)}).choices[0]
    assert second.message.content or second.message.tool_calls


@pytest.mark.parametrize("route", [FAMILY, "token"])
def test_agent_loop_over_http_reaches_the_in_process_greedy_rewards(routed, client, route):
    env = make_env(FAMILY)
    model, tokenizer = load_policy(routed, route)
    budget = turn_token_budget(env, tokenizer)
    episodes = run_episodes(
        HFBackend(model, tokenizer, batch_size=1),
        functools.partial(make_env, FAMILY),
        SEEDS,
        1,
        SamplingConfig(max_new_tokens=budget, temperature=0.0),
    )
    served = "emb" if route == "token" else f"emb:{route}"
    over_http = [play_over_http(client, served, make_env(FAMILY), seed, budget) for seed in SEEDS]
    print(
        f"{served}: rewards in process {[e.reward for e in episodes]}, over HTTP {[r for r, _, _ in over_http]}, "
        f"tool-call replies over HTTP {[c for _, _, c in over_http]}"
    )
    assert [reward for reward, _, _ in over_http] == [e.reward for e in episodes]
    assert [texts for _, texts, _ in over_http] == [
        [m.content for m in e.messages if m.role == "assistant"] for e in episodes
    ]
    # the policy really called tools through the server (for "token": the mixture kept the adapter's skill)
    assert sum(calls for _, _, calls in over_http) > 0
