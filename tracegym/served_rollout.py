"""Multi-turn rollouts sampled by an OpenAI-compatible server (`tracegym serve`, vLLM), with the
episodes, turns, rewards and token accounting of `tracegym.rollout`.

Each turn of each episode is one `POST /v1/chat/completions` of the episode's messages so far, asking
for `logprobs` with vLLM's `return_tokens_as_token_ids`: the reply's `logprobs.content[i].token` is
`token_id:<id>`, so the episode records exactly the tokens the server sampled (ending with the
end-of-turn token when the model stopped by itself), and the turn's text is decoded from them here as
the in-process backend decodes its own. Up to `in_flight` requests are open at once; an episode's
next turn is sent as soon as its environment has stepped, whatever the other episodes are doing.

The prompt the server saw. The server applies the chat template to the messages; the trainer scores
`prompt_ids + completion_ids`, built from the sampled tokens (`tracegym.rollout`). The two are the same
tokens when every earlier assistant turn's sampled tokens are the tokenizer's own encoding of their
decoded text; a non-canonical split (or a special token the decoding drops) makes the server's
re-encoded prompt differ in that turn's tokens only. Every turn is checked twice: the chat rendered
here (`render_chat`, what `tracegym serve` runs) against the trainer's context, and the server's
`usage.prompt_tokens` against the context's length; `info["context_mismatch_turns"]` counts the
turns where either differs (0 when the server saw exactly what the trainer scores).

Sampling seeds. Turn t of rollout r of seed s sends `seed` sampling_seed(params.seed, s, r, t) as
`run_episodes` draws in process; vLLM and `tracegym serve` honour it, so a rerun samples the same
served rollouts (not the in-process ones: each engine samples its own way). Greedy ones
(temperature 0) equal the in-process ones.

Errors: a server that cannot be reached, drops the connection or does not reply within `timeout`
seconds raises `ServerUnavailable` (a UserError naming the URL); an error reply raises UserError
with the server's message, and a reply that is not OpenAI-shaped one naming the URL and what it
lacks; a full queue (503) is retried after its Retry-After (1 second when that is not a number).
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
from transformers import PreTrainedTokenizerBase

from tracegym.config import ServedRolloutConfig
from tracegym.environment import Environment
from tracegym.errors import UserError
from tracegym.generation import Completion, SamplingConfig, render_chat, sampling_seed
from tracegym.rollout import ChatSegments, Episode, _advance, _start, turn_token_budget

TOKEN_ID_PREFIX = "token_id:"
BUSY_RETRIES = 60  # 503 replies (queue full) retried before giving up
COMPLETION = "a chat completion"


class ServerUnavailable(UserError):
    """The rollout server did not answer (refused, dropped the connection, or timed out)."""


@dataclass
class ServedTurn:
    """One sampled turn: the completion and the number of prompt tokens the server counted."""

    completion: Completion
    prompt_tokens: int


class PolicyServer:
    """An OpenAI-compatible server sampling the policy: `url` is its base (with or without `/v1`),
    `model` the name of the base model there, `timeout` the seconds one reply may take, `api_key`
    sent as a bearer token (None: none)."""

    def __init__(self, url: str, model: str, timeout: float, api_key: str | None = None) -> None:
        base = url.rstrip("/")
        self.url = base[: -len("/v1")] if base.endswith("/v1") else base
        self.model, self.timeout = model, timeout
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    @classmethod
    def from_config(cls, config: ServedRolloutConfig) -> PolicyServer:
        """The server of `config` (its URL must be set; the key from `config.api_key_env`)."""
        if config.url is None:
            raise ValueError("served rollouts need a URL")
        return cls(config.url, config.model, config.timeout, os.environ.get(config.api_key_env) or None)

    def unavailable(self, error: Exception) -> ServerUnavailable:
        return ServerUnavailable(
            f"the rollout server {self.url} is not answering ({type(error).__name__}: {error}); start it again "
            "and continue the run with --resume"
        )

    def _checked(self, response: httpx.Response, what: str) -> httpx.Response:
        if response.status_code >= 400:
            raise UserError(f"the rollout server {self.url} refused {what}: {response.status_code} {_reason(response)}")
        return response

    def _call(self, method: str, path: str, what: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            response = httpx.request(method, self.url + path, json=body, headers=self.headers, timeout=self.timeout)
        except httpx.TransportError as error:
            raise self.unavailable(error) from None
        return self._checked(response, what)

    def malformed(self, what: str, missing: str) -> UserError:
        return UserError(
            f"the rollout server {self.url} sent {what} without {missing}: it must reply as an OpenAI-compatible "
            "server (vLLM, tracegym serve)"
        )

    def _json(self, response: httpx.Response, what: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise self.malformed(what, "a JSON body") from None

    def models(self) -> list[str]:
        """The ids `GET /v1/models` lists (the base model and the loaded adapters)."""
        what = "its list of models (GET /v1/models)"
        cards = _lookup(self._json(self._call("GET", "/v1/models", "to list its models"), what), "data")
        ids = [_lookup(card, "id") for card in cards] if isinstance(cards, list) else [_ABSENT]
        if any(not isinstance(name, str) for name in ids):
            raise self.malformed(what, "a 'data' list of models with an 'id' each")
        return ids

    def load_adapter(self, name: str, path: str) -> None:
        """`POST /v1/load_lora_adapter`: serve the PEFT folder `path` (as the server sees it) as `name`."""
        self._call(
            "POST", "/v1/load_lora_adapter", f"to load {path} as '{name}'", {"lora_name": name, "lora_path": path}
        )

    def unload_adapter(self, name: str) -> None:
        """`POST /v1/unload_lora_adapter`: stop serving the adapter `name`."""
        self._call("POST", "/v1/unload_lora_adapter", f"to unload '{name}'", {"lora_name": name})

    async def complete(
        self,
        client: httpx.AsyncClient,
        model: str,
        messages: list[dict[str, str]],
        params: SamplingConfig,
        seed: int | None,
        tokenizer: PreTrainedTokenizerBase,
    ) -> ServedTurn:
        """One assistant turn for `messages` from `model` (the base or an adapter's name)."""
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": True,
            "return_tokens_as_token_ids": True,
        }
        if seed is not None:
            body["seed"] = seed
        if params.stop:
            body["stop"] = list(params.stop)
        for _ in range(BUSY_RETRIES):
            try:
                response = await client.post(self.url + "/v1/chat/completions", json=body, headers=self.headers)
            except httpx.TransportError as error:
                raise self.unavailable(error) from None
            if response.status_code != 503:
                break
            await asyncio.sleep(_retry_after(response))
        reply = self._json(self._checked(response, f"a completion from '{model}'"), COMPLETION)
        return self._turn(reply, tokenizer)

    def _turn(self, reply: Any, tokenizer: PreTrainedTokenizerBase) -> ServedTurn:
        """The turn of a chat completion `reply`; UserError naming what it lacks when it is not OpenAI-shaped."""
        choice = self._field(reply, "choices", 0, kind=dict, name="choices[0]")
        content = _lookup(choice, "logprobs", "content")
        if content is _ABSENT or content is None:
            raise UserError(f"the rollout server {self.url} returned no logprobs: it must support logprobs")
        if not isinstance(content, list):
            raise self.malformed(COMPLETION, "a list at choices[0].logprobs.content")
        entry_name = "choices[0].logprobs.content[{}].{}"
        tokens = [
            self._field(entry, "token", kind=str, name=entry_name.format(i, "token")) for i, entry in enumerate(content)
        ]
        ids = [_token_id(token) for token in tokens]
        if any(token_id is None for token_id in ids):
            raise UserError(
                f"the rollout server {self.url} did not return token ids: it must support vLLM's "
                "return_tokens_as_token_ids"
            )
        logprobs = [
            self._field(entry, "logprob", kind=float, name=entry_name.format(i, "logprob"))
            for i, entry in enumerate(content)
        ]
        if len(ids) != self._field(reply, "usage", "completion_tokens", kind=int):
            raise UserError(
                f"the rollout server {self.url} reported logprobs for a different number of tokens than it sampled"
            )
        reason = self._field(choice, "finish_reason", kind=str, name="choices[0].finish_reason")
        text = tokenizer.decode(ids, skip_special_tokens=True)
        completion = Completion(text, ids, logprobs, "length" if reason == "length" else "stop")
        return ServedTurn(completion, self._field(reply, "usage", "prompt_tokens", kind=int))

    def _field(self, value: Any, *keys: str | int, kind: type, name: str | None = None) -> Any:
        """`value[k0][k1]...` of a chat completion as `kind` (dict, str, int or float); UserError
        naming it (`name`, default the keys joined by dots) when it is missing or of another type."""
        found = _lookup(value, *keys)
        name = name or ".".join(str(key) for key in keys)
        if kind in (int, float):
            if isinstance(found, (int, float)) and not isinstance(found, bool) and math.isfinite(found):
                return kind(found)
            raise self.malformed(COMPLETION, f"a number at {name}")
        if isinstance(found, kind):
            return found
        raise self.malformed(COMPLETION, name)


def connect(config: ServedRolloutConfig) -> tuple[PolicyServer, Path]:
    """The rollout server of `config` (its URL set) and its adapter folder, resolved. Raises
    UserError unless `config.adapter_dir` is an existing folder, the server answers, and it serves
    `config.model`."""
    if config.adapter_dir is None:
        raise UserError(
            "--rollout-url needs --rollout-adapter-dir: a folder the server loads adapters from (its --lora-root)"
        )
    folder = Path(config.adapter_dir).expanduser()
    if not folder.is_dir():
        raise UserError(f"--rollout-adapter-dir {config.adapter_dir}: no such folder")
    server = PolicyServer.from_config(config)
    models = server.models()
    if config.model not in models:
        raise UserError(
            f"the rollout server {server.url} does not serve '{config.model}' (it serves {', '.join(models)}): "
            "set --rollout-model to its base model's name"
        )
    return server, folder.resolve()


_ABSENT = object()


def _lookup(value: Any, *keys: str | int) -> Any:
    """`value[k0][k1]...`, or `_ABSENT` where a key is missing or a value is not a container."""
    for key in keys:
        if isinstance(key, int) and isinstance(value, list) and -len(value) <= key < len(value):
            value = value[key]
        elif isinstance(key, str) and isinstance(value, dict) and key in value:
            value = value[key]
        else:
            return _ABSENT
    return value


def _token_id(token: str) -> int | None:
    """The id of a `token_id:<id>` token, None for any other text."""
    digits = token[len(TOKEN_ID_PREFIX) :]
    return int(digits) if token.startswith(TOKEN_ID_PREFIX) and digits.isascii() and digits.isdigit() else None


def _retry_after(response: httpx.Response) -> float:
    """The seconds a 503 reply's Retry-After asks for: 1 when it is absent or not a number (an HTTP date)."""
    try:
        seconds = float(response.headers.get("Retry-After", "1"))
    except ValueError:
        return 1.0
    return seconds if math.isfinite(seconds) and seconds >= 0 else 1.0


def _reason(response: httpx.Response) -> str:
    """The error message of an OpenAI-shaped error reply, else its text."""
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text.strip()[:500]


def _wire(episode: Episode) -> list[dict[str, str]]:
    return [{"role": message.role, "content": message.content} for message in episode.messages]


async def _play(
    server: PolicyServer,
    client: httpx.AsyncClient,
    gate: asyncio.Semaphore,
    model: str,
    episode: Episode,
    env: Environment,
    rollout: int,
    params: SamplingConfig,
    segments: ChatSegments,
) -> None:
    """Play `episode` to its end, one served turn at a time; counts the context mismatches."""
    turn, mismatches, going = 0, 0, True
    while going:
        context = episode.prompt_ids + episode.completion_ids
        rendered = render_chat(segments.tokenizer, episode.messages)
        seed = None if params.seed is None else sampling_seed(params.seed, episode.seed, rollout, turn)
        async with gate:
            served = await server.complete(client, model, _wire(episode), params, seed, segments.tokenizer)
        mismatches += rendered != context or served.prompt_tokens != len(context)
        going = await asyncio.to_thread(_advance, episode, env, served.completion, segments)
        turn += 1
    episode.info["context_mismatch_turns"] = mismatches


async def _play_all(
    server: PolicyServer,
    model: str,
    jobs: list[tuple[Episode, Environment, int]],
    params: SamplingConfig,
    in_flight: int,
    segments: ChatSegments,
) -> None:
    """Play every (episode, its environment, its rollout index) of `jobs`, `in_flight` turns at once."""
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(timeout=server.timeout, limits=limits) as client:
        gate = asyncio.Semaphore(in_flight)
        await asyncio.gather(*(_play(server, client, gate, model, e, env, r, params, segments) for e, env, r in jobs))


def run_served_episodes(
    server: PolicyServer,
    tokenizer: PreTrainedTokenizerBase,
    env_factory: Callable[[], Environment],
    seeds: Sequence[int],
    rollouts_per_seed: int,
    params: SamplingConfig,
    in_flight: int,
    hint_fraction: float = 0.0,
    model: str | None = None,
) -> list[Episode]:
    """As `tracegym.rollout.run_episodes`, every turn sampled by `server` from `model` (default: its
    base model), up to `in_flight` turns requested at once. `tokenizer` must be the served model's.
    Episodes come back seed-major in the order of `seeds`."""
    if not 0.0 <= hint_fraction <= 1.0:
        raise ValueError(f"hint_fraction must be in [0, 1], got {hint_fraction}")
    if in_flight < 1:
        raise ValueError(f"in_flight must be at least 1, got {in_flight}")
    if params.max_new_tokens is None:
        params = replace(params, max_new_tokens=turn_token_budget(env_factory(), tokenizer))
    hinted_count = round(hint_fraction * rollouts_per_seed)
    jobs = []
    for seed in seeds:
        for rollout in range(rollouts_per_seed):
            env = env_factory()
            jobs.append((_start(env, seed, rollout < hinted_count, tokenizer), env, rollout))
    segments = ChatSegments(tokenizer)
    asyncio.run(_play_all(server, model or server.model, jobs, params, in_flight, segments))
    return [episode for episode, _, _ in jobs]
