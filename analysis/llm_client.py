"""Chat clients for the judge and the proposer: an OpenAI-compatible HTTP endpoint or a local backend.

Both answer `complete(messages, schema, name, temperature, seed) -> str`, the raw text of one
assistant reply constrained (where the server supports it) to the JSON schema `schema`.
Transport failures raise `ClientError`; callers count them, they never crash a run.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any, Protocol


class ClientError(Exception):
    """The endpoint could not be reached or answered with something that is not a chat reply."""


class ChatClient(Protocol):
    model: str

    def complete(
        self, messages: list[dict[str, str]], schema: dict[str, Any], name: str, temperature: float, seed: int
    ) -> str: ...


class OpenAIChatClient:
    """POSTs to `<url>/chat/completions` with `response_format: json_schema` (strict).

    `url` is the API base (e.g. http://127.0.0.1:8000/v1); the key comes from `api_key` or the
    OPENAI_API_KEY environment variable and is optional for local servers. `timeout` in seconds.
    """

    def __init__(
        self, url: str, model: str, api_key: str | None = None, timeout: float = 120.0, max_tokens: int = 1024
    ) -> None:
        base = url.rstrip("/")
        self.endpoint = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.timeout = timeout
        self.max_tokens = max_tokens

    def complete(self, messages, schema, name, temperature, seed) -> str:
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": temperature,
            "seed": seed,
            "max_tokens": self.max_tokens,
            "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
        }
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.endpoint, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = json.loads(response.read().decode("utf-8"))
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as error:
            raise ClientError(f"{self.endpoint}: {error}") from error
        try:
            return payload["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as error:
            raise ClientError(f"{self.endpoint}: reply has no choices[0].message.content") from error


class BackendChatClient:
    """Wraps any object with `chat(conversations, params)` (tracegym.generation.GenerationBackend).

    The schema is stated in the system prompt (a local model has no constrained decoding here);
    pydantic validation downstream catches what the model gets wrong.
    """

    def __init__(self, backend: Any, model: str, max_new_tokens: int = 512) -> None:
        self.backend = backend
        self.model = model
        self.max_new_tokens = max_new_tokens

    def complete(self, messages, schema, name, temperature, seed) -> str:
        from tracegym.generation import SamplingConfig

        prompt = [dict(m) for m in messages]
        prompt[0] = {
            **prompt[0],
            "content": prompt[0]["content"] + "\nAnswer with JSON only, matching this schema: " + json.dumps(schema),
        }
        params = SamplingConfig(max_new_tokens=self.max_new_tokens, temperature=temperature, seed=seed)
        try:
            replies = self.backend.chat([prompt], params)
        except (RuntimeError, ValueError) as error:
            raise ClientError(f"backend {self.model}: {error}") from error
        reply = replies[0]
        return reply if isinstance(reply, str) else reply.text
