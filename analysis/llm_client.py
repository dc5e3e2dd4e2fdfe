"""Chat clients for the judge and the proposer: an OpenAI-compatible HTTP endpoint or a local backend.

Both answer `complete(messages, schema, name, temperature, seed) -> str`, the raw text of one
assistant reply constrained (where the server supports it) to the JSON schema `schema`, and name
where they send requests in `endpoint` (for an HTTP client, the URL POSTed to). A failed request
raises `ClientError`: `EndpointError` when no request to that endpoint can succeed (unreachable,
timing out, the key refused, the model or path unknown, a server error that outlasted the
retries), a plain `ClientError` when this one request was refused (a 4xx about its body) or its
reply is not a chat reply. Messages name the endpoint.
"""

from __future__ import annotations

import json
import os
from typing import Any, Protocol

from tracegym.errors import UserError


class ClientError(Exception):
    """One request got no chat reply (refused for its body, or answered with something else)."""


class EndpointError(ClientError, UserError):
    """The endpoint cannot answer any request: further requests would fail the same way (a
    UserError: uncaught, the CLI prints it as one line)."""


class ChatClient(Protocol):
    model: str
    endpoint: str

    def complete(
        self, messages: list[dict[str, str]], schema: dict[str, Any], name: str, temperature: float, seed: int
    ) -> str: ...


def _detail(body: object) -> str:
    """The server's own words from an error body (OpenAI's {"error": {"message"}}, FastAPI's
    {"detail"}, or the body itself), on one line and at most 200 characters."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    if isinstance(body, dict):
        body = body.get("message") or body.get("detail") or body
    text = " ".join(str(body or "").split())
    return text if len(text) <= 200 else text[:199] + "…"


class OpenAIChatClient:
    """Chat completions through the official `openai` client, `response_format: json_schema` (strict).

    `url` is the API base (e.g. http://127.0.0.1:8000/v1, https://api.openai.com/v1; a trailing
    /chat/completions is dropped). The key is `api_key`, else the OPENAI_API_KEY environment
    variable, else none (a placeholder is sent: local servers need no key). Each request waits at
    most `timeout` seconds and is retried by the client, with exponential backoff, up to
    `max_retries` times on a connection error, a timeout, 408, 409, 429 or 5xx. `max_tokens` caps
    each reply. The `openai` package is imported here, when a client is made.
    """

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_tokens: int = 1024,
        max_retries: int = 2,
    ) -> None:
        from openai import OpenAI  # imported here: commands without a judge never load it

        base = url.rstrip("/").removesuffix("/chat/completions")
        self.endpoint = base + "/chat/completions"  # what is POSTed to, named in every error
        self.model = model
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.max_retries = max_retries
        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._client = OpenAI(base_url=base, api_key=key, timeout=timeout, max_retries=max_retries)

    def complete(self, messages, schema, name, temperature, seed) -> str:
        import openai

        try:
            completion = self._client.chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=temperature,
                seed=seed,
                max_tokens=self.max_tokens,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": name, "schema": schema, "strict": True},
                },
            )
        except openai.APITimeoutError:
            raise EndpointError(f"{self.endpoint}: no reply within {self.timeout:g} s ({self._tries})") from None
        except openai.APIConnectionError as error:
            cause = error.__cause__ or error
            raise EndpointError(f"{self.endpoint}: cannot connect ({self._tries}): {_detail(str(cause))}") from None
        except openai.APIStatusError as error:
            raise self._status_error(error.status_code, _detail(error.body)) from None
        except openai.OpenAIError as error:
            raise ClientError(f"{self.endpoint}: {_detail(str(error))}") from None
        try:
            return completion.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError):
            raise ClientError(f"{self.endpoint}: reply has no choices[0].message.content") from None

    @property
    def _tries(self) -> str:
        return "1 try" if self.max_retries == 0 else f"{self.max_retries + 1} tries"

    def _status_error(self, status: int, detail: str) -> ClientError:
        """The error for an HTTP error status that outlasted the client's retries."""
        said = f"HTTP {status}" + (f": {detail}" if detail else "")
        if status == 401:
            return EndpointError(f"{self.endpoint}: the API key was refused ({said}); set OPENAI_API_KEY or pass a key")
        if status == 403:
            return EndpointError(f"{self.endpoint}: access denied ({said})")
        if status == 404:
            return EndpointError(
                f"{self.endpoint}: the server knows no model {self.model!r}, or the URL given is not an OpenAI "
                f"API base (one usually ends in /v1) ({said})"
            )
        if status in (400, 413, 422):
            return ClientError(f"{self.endpoint}: request refused ({said})")
        retried = status in (408, 409, 429) or status >= 500  # the statuses the openai client retries
        return EndpointError(f"{self.endpoint}: {said}" + (f" ({self._tries})" if retried else ""))


class BackendChatClient:
    """Wraps any object with `chat(conversations, params)` (tracegym.generation.GenerationBackend).

    The schema is stated in the system prompt (a local model has no constrained decoding here);
    pydantic validation downstream catches what the model gets wrong.
    """

    def __init__(self, backend: Any, model: str, max_new_tokens: int = 512) -> None:
        self.backend = backend
        self.model = model
        self.endpoint = f"local backend {model}"
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
